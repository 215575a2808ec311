"""How a task node calls `/oxygen/infer`: from an executor coroutine, never blocking a thread, with a timeout and
every failure turned into an ``Infer.Response`` whose ``error_code`` says what happened.

- The service is absent (the inference node is not running, or restarting): UNAVAILABLE after ``wait_s``; the next
  call checks again, so a task node recovers on its own when the inference node returns.
- No answer within ``timeout_s``: DEADLINE_EXCEEDED, or UNAVAILABLE when the service vanished meanwhile. Text
  requests carry the same ``deadline_s``, so the engine drops a request nobody waits for any more and frees its KV
  blocks instead of decoding it to the end.
- Anything the inference node answers (INVALID_ARGUMENT, FAILED_PRECONDITION, ...) is passed on unchanged.
- A goal that ends cancels its task (``cancel_task``): calls still in flight answer CANCELLED and their KV blocks are
  freed at once, instead of decoding narration nobody will read until their deadline.

rclpy resumes a waiting coroutine only when its executor wakes, so every future completed here wakes it.
"""

import threading
from typing import Any, TypeVar

from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.task import Future

from oxygen_ros.errors import ErrorCode
from oxygen_ros.srv import CancelTask, Infer

T = TypeVar("T")
SERVICE = "/oxygen/infer"
CANCEL_SERVICE = "/oxygen/cancel_task"
_POLL_S = 0.05  # how often a waiting call looks for the service again


async def wait(node: Node, future: Future | None, timeout_s: float) -> tuple[bool, Any]:
    """(True, result) when ``future`` completes within ``timeout_s``, else (False, None). A None ``future`` never
    completes: ``await wait(node, None, s)`` sleeps ``s`` seconds without holding an executor thread."""
    executor = node.executor
    done: Future = Future(executor=executor)

    def finish(ok: bool, value: Any) -> None:
        if not done.done():
            done.set_result((ok, value))
            executor.wake()

    timer = threading.Timer(timeout_s, finish, (False, None))
    timer.daemon = True
    timer.start()
    if future is not None:
        future.add_done_callback(lambda f: finish(True, f.result()) if f.exception() is None else finish(False, None))
    try:
        return await done
    finally:
        timer.cancel()


def error(code: ErrorCode, message: str) -> Infer.Response:
    return Infer.Response(success=False, error_code=code.value, message=message)


class InferClient:
    """One node's client of `/oxygen/infer`; ``call`` may run in many coroutines at once."""

    def __init__(self, node: Node, group: CallbackGroup, wait_s: float, timeout_s: float) -> None:
        self._node = node
        self._client = node.create_client(Infer, SERVICE, callback_group=group)
        self._cancel = node.create_client(CancelTask, CANCEL_SERVICE, callback_group=group)
        self.wait_s, self.timeout_s = wait_s, timeout_s

    def ready(self) -> bool:
        return self._client.service_is_ready()

    async def available(self) -> bool:
        """Whether the service appears within ``wait_s`` (polled, so no executor thread is held)."""
        for _ in range(max(1, round(self.wait_s / _POLL_S))):
            if self.ready():
                return True
            await wait(self._node, None, _POLL_S)
        return self.ready()

    def cancel_task(self, task_id: str) -> None:
        """Cancel every request of ``task_id`` in the inference node; fire and forget (an absent node has none)."""
        if self._cancel.service_is_ready():
            self._cancel.call_async(CancelTask.Request(task_id=task_id))

    async def ask_about(self, request: Infer.Request, observation_id: str) -> Infer.Response:
        """``request`` about ``observation_id`` (a frame this node saw); when the inference node does not have that
        frame (NOT_FOUND: it just started, or has moved past it) about its own latest observation instead."""
        request.observation_id = observation_id
        response = await self.call(request)
        if response.error_code == ErrorCode.NOT_FOUND.value and observation_id:
            request.observation_id = ""
            response = await self.call(request)
        return response

    async def call(self, request: Infer.Request) -> Infer.Response:
        if not await self.available():
            return error(ErrorCode.UNAVAILABLE, f"{SERVICE} is not available (is the inference node running?)")
        if request.want_text and not request.deadline_s:
            request.deadline_s = self.timeout_s
        future = self._client.call_async(request)
        ok, response = await wait(self._node, future, self.timeout_s)
        if ok:
            return response
        self._client.remove_pending_request(future)
        if not self.ready():
            return error(ErrorCode.UNAVAILABLE, f"{SERVICE} went away while answering")
        return error(ErrorCode.DEADLINE_EXCEEDED, f"{SERVICE} did not answer within {self.timeout_s:g} s")
