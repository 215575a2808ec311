"""`vqa_node`: answers questions about the latest or a named observation with the shared model, as the `/vqa/ask`
service (AskQuestion: the whole answer at once) and as the `/vqa/ask` action (the answer streams as feedback while
it is decoded; cancel ends it and frees its KV blocks at once), so a behaviour tree or a UI can show it growing.

It loads no model: each question becomes one request to the inference node (task_type vqa: `/oxygen/infer` for the
service, `/oxygen/generate` for the action), so the observation's prefix is the one the other tasks share in the
inference node's pool. The callbacks are coroutines (see infer_client), so many questions can wait at once without
holding executor threads. Errors come back in ``error_code``: INVALID_ARGUMENT for an empty question, OUT_OF_RANGE
for a question or observation_id over its ``bounds``, UNAVAILABLE when the inference node is not running (the next
question after it returns is answered), CANCELLED for a cancelled goal, and whatever the inference node says (e.g.
NOT_FOUND for an unknown observation; it bounds max_new_tokens by its context).

"The latest observation" ('') is the newest frame received on `camera_topic` or `observation_topic` (camera_sim's
scene text names its Image by id; see latest_frame). A model that reads images is sent that frame's images (InferClient.ask_about); a text-only model gets
it by id, named explicitly: the inference node also hears the bare camera image of a frame, which may arrive before
its text, and a text-only model asked about that would see no scene at all. Only when the inference node does not
know that frame (it just started) is its own latest observation used. A named observation is asked about by id.
"""

import itertools
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from rclpy.action import ActionServer, CancelResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from oxygen_ros.action import AskQuestion as AskQuestionAction
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros import bounds
from oxygen_ros.nodes import latest_frame
from oxygen_ros.nodes.declare import Ranges, Table, declare
from oxygen_ros.nodes.executor import Executor
from oxygen_ros.nodes.infer_client import InferClient, TextCallback
from oxygen_ros.nodes.latest_frame import LatestFrame
from oxygen_ros.nodes.qos import ACTION_SERVER_QOS, SERVICE_QUEUE
from oxygen_ros.nodes.spin import run
from oxygen_ros.srv import AskQuestion, Infer

NODE_NAME = "vqa_node"
PARAMETERS: Table = {
    "max_new_tokens": (32, "answer token budget when a request gives 0"),
    "infer_timeout_s": (60.0, "longest wait for /oxygen/infer to answer, seconds"),
    "service_wait_s": (1.0, "how long to wait for /oxygen/infer to appear before answering UNAVAILABLE, seconds"),
    **latest_frame.PARAMETERS,
}
RANGES: Ranges = {"max_new_tokens": (1, 4096), "infer_timeout_s": (0.0, 3600.0), "service_wait_s": (0.0, 600.0)}


class VqaNode(Node):
    """Raises ValueError naming a bad parameter."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        # every value is read once here: set later, it is refused (read_only) rather than silently ignored
        value = declare(self, PARAMETERS, ("max_new_tokens", "infer_timeout_s", "service_wait_s"), RANGES, PARAMETERS)
        self._max_new_tokens = value["max_new_tokens"]
        group = ReentrantCallbackGroup()
        self._infer = InferClient(self, group, value["service_wait_s"], value["infer_timeout_s"])
        self._ids = itertools.count()
        self.frame = LatestFrame(self, value, group)
        self.create_service(AskQuestion, "vqa/ask", self._on_ask, qos_profile=SERVICE_QUEUE, callback_group=group)
        self._server = ActionServer(self, AskQuestionAction, "vqa/ask", execute_callback=self._on_goal,
                                    cancel_callback=self._on_cancel, callback_group=group,
                                    **ACTION_SERVER_QOS)  # fmt: skip

    def destroy_node(self) -> None:
        self._server.destroy()
        self._infer.destroy()
        super().destroy_node()

    async def _on_ask(self, request: AskQuestion.Request, response: AskQuestion.Response) -> AskQuestion.Response:
        return await self._answer(request, response, f"{self.get_fully_qualified_name()}/{next(self._ids)}")

    async def _on_goal(self, goal_handle: ServerGoalHandle) -> AskQuestionAction.Result:
        def relay(piece: str, tokens: int) -> None:
            goal_handle.publish_feedback(AskQuestionAction.Feedback(text=piece, generated_tokens=tokens))

        result = await self._answer(goal_handle.request, AskQuestionAction.Result(), self._task_of(goal_handle), relay,
                                    lambda: goal_handle.is_cancel_requested)  # fmt: skip
        if result.success:
            goal_handle.succeed()
        elif result.error_code == ErrorCode.CANCELLED.value and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.abort()
        return result

    def _on_cancel(self, goal_handle: ServerGoalHandle) -> CancelResponse:
        """The goal's request is cancelled in the inference node: its result comes back CANCELLED at once."""
        self._infer.cancel_task(self._task_of(goal_handle))
        return CancelResponse.ACCEPT

    def _task_of(self, goal_handle: ServerGoalHandle) -> str:
        """A goal's task_id in the inference node, from its goal id: what its cancel cancels. The node's full
        name keeps two robots' questions apart in the shared pool and its per-task KV report."""
        return f"{self.get_fully_qualified_name()}/goal-{uuid.UUID(bytes=bytes(goal_handle.goal_id.uuid))}"

    async def _answer(self, request: Any, target: Any, task_id: str, on_text: TextCallback | None = None,
                      cancelled: Callable[[], bool] = lambda: False) -> Any:  # fmt: skip
        """Fill ``target`` (the service's response or the action's result) with the answer to ``request``; one whose
        goal is cancelled before or while it is asked (``cancelled``) is CANCELLED."""
        start = time.perf_counter()
        try:
            check_question(request)
        except EngineError as exc:
            out = Infer.Response(error_code=exc.code.value, message=exc.message)
        else:
            infer = Infer.Request(
                task_id=task_id,
                task_type="vqa",
                prompt=request.question,
                want_text=True,
                max_new_tokens=request.max_new_tokens or self._max_new_tokens,
            )
            if request.observation_id:  # a named frame: NOT_FOUND when the inference node has no such frame
                infer.observation_id = request.observation_id
                out = await self._infer.call(infer, on_text, cancelled)
            else:
                out = await self._infer.ask_about(infer, self.frame, on_text, cancelled)
        target.success, target.error_code, target.message = out.success, out.error_code, out.message
        target.answer, target.observation_id = out.text.strip(), out.observation_id
        target.reused_prefix_tokens = out.reused_prefix_tokens
        target.reused_image_tokens = out.reused_image_tokens
        target.latency_ms = (time.perf_counter() - start) * 1e3
        return target


def check_question(request: AskQuestion.Request | AskQuestionAction.Goal) -> None:
    bounds.text("question", request.question, bounds.TEXT_CHARS)
    bounds.text("observation_id", request.observation_id, bounds.ID_CHARS)
    if not request.question.strip():
        raise EngineError(ErrorCode.INVALID_ARGUMENT, "the question is empty")


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros vqa_node`."""
    return run(VqaNode, partial(Executor, num_threads=2), NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
