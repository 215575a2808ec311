"""The MultiThreadedExecutor every oxygen_ros process spins: rclpy's, minus a quadratic slowdown of its 9.1 release.

rclpy 9.1.2 (the Kilted wheels) re-yields every pending coroutine task (a service callback awaiting the engine, a
task node awaiting `/oxygen/infer`) on each pass of its wait loop, and its MultiThreadedExecutor appends the task
to its ``_futures`` list every time, then scans the whole list for finished ones. With a dozen requests in flight
and timers at 10 Hz the list grows to thousands of copies of the same tasks, and the spin thread spends most of
the GIL on that scan: in the demo it took about half of all GIL time and left the model's thread a few percent
(py-spy). Upstream ros2/rclpy#1452, fixed in later rclpy by #1547 (yield the GIL after a submit) and a ready-task
queue. Here each task is listed once; resubmitting it stays as upstream does it (a task that is running or
queued ignores the extra call, a parked coroutine gets polled), and the spin thread yields the GIL after a submit.

One fault never stops the spin: rclpy re-raises a callback's exception from ``spin``, so one bad callback (or a
waitable caught half-built, ros2/rclpy#1589) used to end the loop of every node in the process, which then stopped
being served without exiting. Here the exception is logged with its node's logger and traceback, and the executor
goes on serving the rest; so is a failure while it builds its wait set (the next pass builds it afresh).
"""

import os
import traceback

from rclpy.executors import (
    ConditionReachedException,
    ExternalShutdownException,
    MultiThreadedExecutor,
    ShutdownException,
    TimeoutException,
    TimeoutObject,
)
from rclpy.logging import get_logger
from rclpy.node import Node
from rclpy.task import Task

# Tasks made with create_task belong to no node; rclpy's throttling lives in the logger object, so there is one.
LOGGER = get_logger("oxygen_ros.executor")


class Executor(MultiThreadedExecutor):
    def __init__(self, num_threads: int | None = None, **kwargs) -> None:
        super().__init__(num_threads, **kwargs)
        self._nodes_of: dict[Task, Node | None] = {}  # each task in _futures and the node it serves

    def _spin_once_impl(self, timeout_sec: float | TimeoutObject | None = None, wait_condition=lambda: False) -> None:
        try:
            handler, _, node = self.wait_for_ready_callbacks(timeout_sec, None, wait_condition)
        except (ExternalShutdownException, ShutdownException, TimeoutException, ConditionReachedException):
            return
        except Exception as exc:  # e.g. an entity that raised while being added to the wait set
            LOGGER.error(_report("building the wait set", exc), throttle_duration_sec=1.0)
            return
        self._executor.submit(handler)
        if handler not in self._nodes_of:
            self._futures.append(handler)
            self._nodes_of[handler] = node
        for future in [f for f in self._futures if f.done()]:
            self._futures.remove(future)
            node = self._nodes_of.pop(future)
            if future.exception() is not None:
                (LOGGER if node is None else node.get_logger()).error(_report("a callback", future.exception()))
        os.sched_yield()


def _report(what: str, exc: BaseException) -> str:
    trace = "".join(traceback.format_exception(exc)).rstrip()
    return f"{what} raised {type(exc).__name__}: {exc}; the executor keeps serving the rest\n{trace}"
