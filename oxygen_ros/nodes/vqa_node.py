"""`vqa_node`: answers `/vqa/ask` (AskQuestion) about the latest or a named observation with the shared model.

It loads no model: each question becomes one `/oxygen/infer` call (task_type vqa), so the observation's prefix is
the one the other tasks share in the inference node's pool. The callback is a coroutine (see infer_client), so
many questions can wait at once without holding executor threads. Errors come back in ``error_code``:
INVALID_ARGUMENT for an empty question, OUT_OF_RANGE for a question or observation_id over its ``bounds``,
UNAVAILABLE when the inference node is not running (the next question after it returns is answered), and whatever
the inference node says (e.g. NOT_FOUND for an unknown observation; it bounds max_new_tokens by its context).

"The latest observation" ('') is the newest one received on `/oxygen/observation` (camera_sim's frames with their
scene text), named explicitly: the inference node also hears the bare camera image of a frame, which may arrive
before its text, and a text-only model asked about that would see no scene at all. Only when the inference node
does not know that frame (it just started) is its own latest observation used.
"""

import itertools
from functools import partial
import time
from typing import Any

from rclpy.callback_groups import ReentrantCallbackGroup
from oxygen_ros.nodes.executor import Executor
from rclpy.node import Node

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes import bounds
from oxygen_ros.nodes.declare import Table, declare
from oxygen_ros.nodes.infer_client import InferClient
from oxygen_ros.nodes.latest_frame import LatestFrame
from oxygen_ros.nodes.qos import SERVICE_QUEUE
from oxygen_ros.nodes.spin import run
from oxygen_ros.srv import AskQuestion, Infer

NODE_NAME = "vqa_node"
PARAMETERS: Table = {
    "max_new_tokens": (32, "answer token budget when a request gives 0"),
    "infer_timeout_s": (60.0, "longest wait for /oxygen/infer to answer, seconds"),
    "service_wait_s": (1.0, "how long to wait for /oxygen/infer to appear before answering UNAVAILABLE, seconds"),
    "observation_topic": ("/oxygen/observation", "oxygen_ros/Observation input: what 'the latest observation' is"),
}


class VqaNode(Node):
    """Raises ValueError naming a bad parameter."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        value = declare(self, PARAMETERS, positive=("max_new_tokens", "infer_timeout_s", "service_wait_s"))
        self._max_new_tokens = value["max_new_tokens"]
        group = ReentrantCallbackGroup()
        self._infer = InferClient(self, group, value["service_wait_s"], value["infer_timeout_s"])
        self._ids = itertools.count()
        self._frame = LatestFrame(self, value["observation_topic"], group)
        self.create_service(AskQuestion, "/vqa/ask", self._on_ask, qos_profile=SERVICE_QUEUE, callback_group=group)

    async def _on_ask(self, request: AskQuestion.Request, response: AskQuestion.Response) -> AskQuestion.Response:
        start = time.perf_counter()
        try:
            check_question(request)
        except EngineError as exc:
            out = Infer.Response(error_code=exc.code.value, message=exc.message)
        else:
            infer = Infer.Request(
                task_id=f"{NODE_NAME}/{next(self._ids)}",
                task_type="vqa",
                prompt=request.question,
                observation_id=request.observation_id,
                want_text=True,
                max_new_tokens=request.max_new_tokens or self._max_new_tokens,
            )
            if request.observation_id:  # a named frame: NOT_FOUND when the inference node has no such frame
                out = await self._infer.call(infer)
            else:
                out = await self._infer.ask_about(infer, self._frame.observation_id())
        response.success, response.error_code, response.message = out.success, out.error_code, out.message
        response.answer, response.reused_prefix_tokens = out.text.strip(), out.reused_prefix_tokens
        response.latency_ms = (time.perf_counter() - start) * 1e3
        return response


def check_question(request: AskQuestion.Request) -> None:
    bounds.text("question", request.question, bounds.TEXT_CHARS)
    bounds.text("observation_id", request.observation_id, bounds.ID_CHARS)
    if not request.question.strip():
        raise EngineError(ErrorCode.INVALID_ARGUMENT, "the question is empty")


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros vqa_node`."""
    return run(VqaNode, partial(Executor, num_threads=2), NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
