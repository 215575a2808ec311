"""`/oxygen/generate`: generation as a ROS action, the answer streamed as feedback (llama_ros' GenerateResponse).

A caller (a behaviour tree, `oxygen-ros ask`, a task node) gets the text as it is decoded, can cancel, and never
holds a thread while it waits.  The goal carries the Infer request's fields, sampling controls and optionally an
inline observation; feedback is the text added since the last feedback, at most every ``feedback_every`` tokens, and
the pieces add up to the result's text exactly (the request's ``IncrementalDetokenizer``).  A cancel aborts the request in the engine: it ends
within one decode step, CANCELLED, its KV blocks freed.
"""

import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future as ConcurrentFuture
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle

from oxygen_ros.action import Generate
from oxygen_ros.engine.async_engine import AsyncEngine
from oxygen_ros.engine.io import Observation, RequestOutput
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes import convert
from oxygen_ros.nodes.image_budget import ImageBudget
from oxygen_ros.nodes.params import NodeParams
from oxygen_ros.nodes.qos import ACTION_SERVER_QOS

Serving = Callable[[], tuple[AsyncEngine | None, Callable[[Any], Observation | None] | None, NodeParams | None, str]]
MAX_FEEDBACK_EVERY = 1024


class GenerateServer:
    """The action server, on ``node``; ``serving()`` gives (engine, observation resolver, settings, node state) now,
    ``wait(future)`` awaits an engine future inside an executor coroutine."""

    def __init__(self, node: Any, serving: Serving, wait: Callable[[ConcurrentFuture], Awaitable[Any]],
                 images: ImageBudget, callback_group: Any) -> None:  # fmt: skip
        self._serving, self._wait, self._images = serving, wait, images
        self._lock = threading.Lock()  # a cancel and its goal's start run on different executor threads
        self._requests: dict[bytes, tuple[AsyncEngine, str]] = {}  # goal id -> (engine, request id), while running
        self._cancelled: set[bytes] = set()  # goals cancelled before their request was made, while they execute
        # deep queues (a flood of goals from several task nodes must not lose any) and results kept as task nodes do
        self.server = ActionServer(node, Generate, "oxygen/generate", execute_callback=self._execute,
                                   goal_callback=lambda _: GoalResponse.ACCEPT, cancel_callback=self._cancel,
                                   callback_group=callback_group, **ACTION_SERVER_QOS)  # fmt: skip

    def _cancel(self, goal_handle: ServerGoalHandle) -> CancelResponse:
        """The engine aborts the goal's request (also one whose submit it has not seen yet); a goal whose request is
        not made yet is marked, and ends CANCELLED without it (rclpy marks the goal cancelling only after this
        returns, so the goal's own check could miss it)."""
        key = bytes(goal_handle.goal_id.uuid)
        with self._lock:
            running = self._requests.get(key)
            if running is None and goal_handle.is_active:  # (one that ended already takes nothing from a mark)
                self._cancelled.add(key)
        if running is not None:
            engine, request_id = running
            engine.abort(request_id)
        return CancelResponse.ACCEPT

    async def _execute(self, goal_handle: ServerGoalHandle) -> Generate.Result:
        key = bytes(goal_handle.goal_id.uuid)
        try:
            return await self._generate(goal_handle, key)
        finally:
            with self._lock:  # every accepted goal executes: what its cancel marked goes with it
                self._requests.pop(key, None)
                self._cancelled.discard(key)
            # rclpy keeps an ended goal's handle, its request with it, for its result's keep time (minutes)
            goal_handle.request.observation, goal_handle.request.messages = [], []

    async def _generate(self, goal_handle: ServerGoalHandle, key: bytes) -> Generate.Result:
        received = time.perf_counter()  # a cancel of its task from now on cancels it
        goal = goal_handle.request
        result = Generate.Result()
        engine, resolve, settings, state = self._serving()
        if state != "active":
            return _end(goal_handle, result, ErrorCode.FAILED_PRECONDITION, f"node is not active ({state})")
        busy = engine.busy()  # before its images are decoded
        if busy:
            return _end(goal_handle, result, ErrorCode.RESOURCE_EXHAUSTED, busy)
        try:
            convert.check_generate_goal(goal, settings.max_prompt_chars, MAX_FEEDBACK_EVERY)
            with self._images.hold(goal):  # until answered: what the goal brought, decoded, is held till then
                return await self._answer(goal_handle, key, resolve(goal), engine, settings, received)
        except EngineError as exc:
            return _end(goal_handle, result, exc.code, exc.message)

    async def _answer(self, goal_handle: ServerGoalHandle, key: bytes, observation: Observation | None,
                      engine: AsyncEngine, settings: NodeParams, received: float) -> Generate.Result:  # fmt: skip
        """The goal's request made and answered, the goal ended as the engine answered (EngineError: not made)."""
        goal, result = goal_handle.request, Generate.Result()
        greq = convert.generate_request(goal, observation, settings.sampling_defaults(), settings.max_prompt_chars)
        greq.request_id = f"generate-{uuid.UUID(bytes=key)}"
        with self._lock:
            self._requests[key] = (engine, greq.request_id)
            cancelled = key in self._cancelled

        def on_text(piece: str, tokens: int) -> None:
            if piece:
                goal_handle.publish_feedback(Generate.Feedback(text=piece, generated_tokens=tokens))

        if cancelled or goal_handle.is_cancel_requested:
            return _end(goal_handle, result, ErrorCode.CANCELLED, "cancelled before it started")
        out: RequestOutput = await self._wait(engine.submit(greq, on_text=on_text, text_every=goal.feedback_every or 1,
                                                               received_at=received))
        convert.fill_generate_result(result, out, observation)
        if out.error_code is None:
            goal_handle.succeed()
        elif out.error_code == ErrorCode.CANCELLED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.abort()
        return result


def _end(goal_handle: ServerGoalHandle, result: Generate.Result, code: ErrorCode, message: str) -> Generate.Result:
    """A goal that never reached the engine: aborted (or cancelled) with the reason. rclpy moves a goal to cancelling
    only once its cancel callback returned: a goal cancelled before that ends aborted, its result CANCELLED."""
    result.success, result.error_code, result.message = False, code.value, message
    if code == ErrorCode.CANCELLED and goal_handle.is_cancel_requested:
        goal_handle.canceled()
    else:
        goal_handle.abort()
    return result
