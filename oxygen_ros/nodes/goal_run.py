"""One running action goal of a task node: how its timer callbacks end it and how its result is reported.

A task node's execute coroutine starts timers and then awaits ``run.ended``; whatever ends the goal (the timer
seeing it done or cancelled, a newer goal preempting it, a failure) calls ``end`` once, which wakes the executor
so the coroutine resumes at once. ``report`` then sets the goal's terminal state from the outcome: SUCCEEDED,
CANCELED (the client asked), or ABORTED with the error code in the result (bad goals are accepted and aborted with
INVALID_ARGUMENT, so the client always gets a code and a message rather than a bare rejection).
"""

import threading
from typing import Any

from rclpy.action.server import ServerGoalHandle
from rclpy.node import Node
from rclpy.task import Future

from oxygen_ros import bounds
from oxygen_ros.errors import ErrorCode


class GoalRun:
    def __init__(self, node: Node, goal_handle: ServerGoalHandle, task_id: str) -> None:
        self.goal_handle = goal_handle
        self.task_id = task_id  # the goal's task_id in /oxygen/infer requests (the pool accounts KV blocks by it)
        self.asking = False  # a language-head call for this goal is in flight
        self._executor = node.executor
        self._lock = threading.Lock()
        self.ended: Future = Future(executor=self._executor)
        self.stop = threading.Event()  # set with ``ended``, for threads that wait on the goal
        self.reported = threading.Event()  # set once the goal's terminal state is sent (``report``)

    @property
    def running(self) -> bool:
        return not self.ended.done()

    def end(self, code: ErrorCode | str | None = None, message: str = "") -> None:
        """Finish the goal: ``code`` None = success; a string is an error code passed on from `/oxygen/infer`.
        Only the first call counts."""
        with self._lock:
            if self.ended.done():
                return
            self.ended.set_result((code.value if isinstance(code, ErrorCode) else code, message))
            self.stop.set()
        self._executor.wake()

    def end_if_cancelled(self) -> bool:
        if self.goal_handle.is_cancel_requested:
            self.end(ErrorCode.CANCELLED, "cancelled by the client")
        return not self.running

    def report(self, result: Any, note: str = "") -> Any:
        """Fill ``result``'s success / error_code / message from the outcome (and ``note``, what happened after it:
        e.g. a cancel nobody confirmed) and set the goal's terminal state."""
        code, message = self.ended.result() if self.ended.done() else ("INTERNAL", "the goal never ended")
        message = f"{message[: bounds.TEXT_CHARS]}; {note}" if note else message  # the note is ours: never cut
        result.success, result.error_code, result.message = code is None, code or "", message
        if code is None:
            self.goal_handle.succeed()
        elif code == ErrorCode.CANCELLED.value and self.goal_handle.is_cancel_requested:
            self.goal_handle.canceled()
        else:
            self.goal_handle.abort()
        self.reported.set()
        return result
