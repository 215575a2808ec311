"""The MultiThreadedExecutor every oxygen_ros process spins: rclpy's, minus a quadratic slowdown of its 9.1 release.

rclpy 9.1.2 (the Kilted wheels) re-yields every pending coroutine task (a service callback awaiting the engine, a
task node awaiting `/oxygen/infer`) on each pass of its wait loop, and its MultiThreadedExecutor appends the task
to its ``_futures`` list every time, then scans the whole list for finished ones. With a dozen requests in flight
and timers at 10 Hz the list grows to thousands of copies of the same tasks, and the spin thread spends most of
the GIL on that scan: in the demo it took about half of all GIL time and left the model's thread a few percent
(py-spy). Upstream ros2/rclpy#1452, fixed in later rclpy by #1547 (yield the GIL after a submit) and a ready-task
queue. Here each task is listed once; resubmitting it stays as upstream does it (a task that is running or
queued ignores the extra call, a parked coroutine gets polled), and the spin thread yields the GIL after a submit.
"""

import os

from rclpy.executors import (
    ConditionReachedException,
    ExternalShutdownException,
    MultiThreadedExecutor,
    ShutdownException,
    TimeoutException,
    TimeoutObject,
)


class Executor(MultiThreadedExecutor):
    def _spin_once_impl(self, timeout_sec: float | TimeoutObject | None = None, wait_condition=lambda: False) -> None:
        try:
            handler, _, _ = self.wait_for_ready_callbacks(timeout_sec, None, wait_condition)
        except (ExternalShutdownException, ShutdownException, TimeoutException, ConditionReachedException):
            return
        self._executor.submit(handler)
        if handler not in self._futures:
            self._futures.append(handler)
        for future in [f for f in self._futures if f.done()]:
            self._futures.remove(future)
            future.result()  # raise any exception of a finished callback, as rclpy does
        os.sched_yield()
