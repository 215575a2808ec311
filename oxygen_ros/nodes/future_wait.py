"""Awaiting an rclpy future from an executor coroutine with a timeout, without holding an executor thread.

rclpy's executors resume a waiting coroutine only when woken, so every future completed here wakes them; the future
awaited belongs to no executor, so the project's executor puts the parked coroutine back (and wakes) from the
completing thread at once (``nodes.executor``). Shared by the task nodes' clients of the inference node
(``infer_client``, ``served_model``), of nav2 (``navigation_node``, ``nav2_handoff``) and of the arm's controllers
(``arm_io``, ``trajectory_controller``, ``gripper_io``, ``controller_params``, ``controller_activity``).
"""

import threading
import time
from collections.abc import Callable
from typing import Any

from rclpy.exceptions import InvalidHandle
from rclpy.node import Node
from rclpy.task import Future

GONE_POLL_S = 0.25  # how often a wait with ``give_up`` asks it (e.g. whether the server is still there)


async def wait(
    node: Node, future: Future | None, timeout_s: float, give_up: Callable[[], bool] | None = None
) -> tuple[bool, Any]:
    """(True, result) when ``future`` completes within ``timeout_s``, else (False, None), also as soon as
    ``give_up()`` is true (polled every ``GONE_POLL_S`` on a watcher thread: the executor wakes only once). A None
    ``future`` never completes: ``await wait(node, None, s)`` sleeps ``s`` seconds without holding an executor
    thread."""
    executor = node.executor
    done: Future = Future()
    finished = threading.Event()
    period = GONE_POLL_S if give_up else timeout_s

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
