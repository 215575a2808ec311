"""How a task node calls `/oxygen/infer`: from an executor coroutine, never blocking a thread, with a timeout and
every failure turned into an ``Infer.Response`` whose ``error_code`` says what happened.

- The service is absent (the inference node is not running, or restarting): UNAVAILABLE after ``wait_s``; the next
  call checks again, so a task node recovers on its own when the inference node returns.
- The server a call went to vanishes while it waits (the inference node's process died): UNAVAILABLE as soon as
  discovery notices, not after ``timeout_s``: a dead server never answers. The servers are polled every
  ``_GONE_POLL_S`` by the id of their request reader, so a server restarted meanwhile (which never got the request)
  does not hide that the old one is gone. Discovery drops a SIGKILLed process after its DDS lease: 2 s for the
  processes of `oxygen-ros up` (config/fastdds_profile.xml), 20 s by Fast DDS's default.
- No answer within ``timeout_s``: DEADLINE_EXCEEDED. Text requests carry the same ``deadline_s``, so the engine
  drops a request nobody waits for any more and frees its KV blocks instead of decoding it to the end.
- Anything the inference node answers (INVALID_ARGUMENT, FAILED_PRECONDITION, ...) is passed on unchanged.
- A goal that ends cancels its task (``cancel_task``): calls still in flight answer CANCELLED and their KV blocks are
  freed at once, instead of decoding narration nobody will read until their deadline.

rclpy resumes a waiting coroutine only when its executor wakes, so every future completed here wakes it.
"""

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rclpy.callback_groups import CallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node
from rclpy.task import Future

from oxygen_ros.errors import ErrorCode
from oxygen_ros.nodes.qos import SERVICE_QUEUE
from oxygen_ros.srv import CancelTask, Infer

T = TypeVar("T")
SERVICE = "/oxygen/infer"
REQUEST_TOPIC = f"rq{SERVICE}Request"  # the service's request topic as DDS names it (every DDS rmw): its readers
CANCEL_SERVICE = "/oxygen/cancel_task"
_POLL_S = 0.05  # how often a call waiting for the service to appear looks for it again
_GONE_POLL_S = 0.25  # how often a call waiting for an answer checks that the server is still there


async def wait(
    node: Node, future: Future | None, timeout_s: float, give_up: Callable[[], bool] | None = None
) -> tuple[bool, Any]:
    """(True, result) when ``future`` completes within ``timeout_s``, else (False, None), also as soon as
    ``give_up()`` is true (polled every ``_GONE_POLL_S`` on a watcher thread: the executor wakes only once). A None
    ``future`` never completes: ``await wait(node, None, s)`` sleeps ``s`` seconds without holding an executor
    thread."""
    executor = node.executor
    done: Future = Future(executor=executor)
    finished = threading.Event()
    period = _GONE_POLL_S if give_up else timeout_s

    def finish(ok: bool, value: Any) -> None:
        if not done.done():
            done.set_result((ok, value))
            executor.wake()
        finished.set()

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while not finished.wait(min(period, max(0.0, deadline - time.monotonic()))):
            try:
                stop = time.monotonic() >= deadline or (give_up is not None and give_up())
            except InvalidHandle:  # the node was destroyed (shutdown) while the call waited: nobody is left to ask
                stop = True
            if stop:
                finish(False, None)
                return

    threading.Thread(target=watch, name="infer-wait", daemon=True).start()
    if future is not None:
        future.add_done_callback(lambda f: finish(True, f.result()) if f.exception() is None else finish(False, None))
    try:
        return await done
    finally:
        finished.set()


def error(code: ErrorCode, message: str) -> Infer.Response:
    return Infer.Response(success=False, error_code=code.value, message=message)


class InferClient:
    """One node's client of `/oxygen/infer`; ``call`` may run in many coroutines at once."""

    def __init__(self, node: Node, group: CallbackGroup, wait_s: float, timeout_s: float) -> None:
        self._node = node
        self._client = node.create_client(Infer, SERVICE, qos_profile=SERVICE_QUEUE, callback_group=group)
        self._cancel = node.create_client(CancelTask, CANCEL_SERVICE, qos_profile=SERVICE_QUEUE, callback_group=group)
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
        servers = self._servers()
        future = self._client.call_async(request)
        ok, response = await wait(self._node, future, self.timeout_s, give_up=lambda: self._gone(servers))
        if ok:
            return response
        self._client.remove_pending_request(future)
        if self._gone(servers):
            return error(ErrorCode.UNAVAILABLE, f"{SERVICE} went away while answering (did the inference node die?)")
        return error(ErrorCode.DEADLINE_EXCEEDED, f"{SERVICE} did not answer within {self.timeout_s:g} s")

    def _servers(self) -> set[bytes]:
        """The ids of the servers' request readers now (empty where the rmw does not name them)."""
        readers = self._node.get_subscriptions_info_by_topic(REQUEST_TOPIC, no_mangle=True)
        return {bytes(reader.endpoint_gid) for reader in readers}

    def _gone(self, servers: set[bytes]) -> bool:
        """Whether every server of ``servers`` has left the graph (without their ids: whether no server is left)."""
        return not (servers & self._servers()) if servers else not self.ready()
