"""The MultiThreadedExecutor every oxygen_ros process spins: rclpy's, minus a quadratic slowdown of its 9.1 release.

rclpy 9.1.2 (the Kilted wheels) re-yields every pending coroutine task (a service callback awaiting the engine, a
task node awaiting `/oxygen/infer`) on each pass of its wait loop, and its MultiThreadedExecutor appends the task
to its ``_futures`` list every time, then scans the whole list for finished ones. With a dozen requests in flight
and timers at 10 Hz the list grows to thousands of copies of the same tasks, and the spin thread spends most of
the GIL on that scan: in the demo it took about half of all GIL time and left the model's thread a few percent
(py-spy). Upstream ros2/rclpy#1452, fixed in later rclpy by #1547 (yield the GIL after a submit) and a ready-task
queue. Here each task is listed once, and the spin thread yields the GIL after a submit.

A coroutine awaiting a future is parked, not polled: rclpy 9.1 yields every pending task on every pass of its wait
loop and ``Future.__await__`` is ``while pending: yield``, so every wake-up (a timer, a message, a finished request)
resumes every waiting coroutine once more, on the GIL the model's thread needs (py-spy, the multitask suite: 44% of
GIL samples, the engine thread on a CPU only 71% of its step time). Here a task whose
coroutine is suspended in ``await future`` on a pending rclpy future (found by walking the coroutine's await chain,
so every ``await`` in every node qualifies without its code knowing) leaves the task list until that future's done
callback puts it back and wakes the wait set, as asyncio and later rclpy's ready-task queue do.

One fault never stops the spin: rclpy re-raises a callback's exception from ``spin``, so one bad callback (or a
waitable caught half-built, ros2/rclpy#1589) used to end the loop of every node in the process, which then stopped
being served without exiting. Here the exception is logged with its node's logger and traceback, and the executor
goes on serving the rest; so is a failure while it builds its wait set (the next pass builds it afresh).
"""

import contextlib
import inspect
import os
import threading
import traceback
from typing import Any

from rclpy.exceptions import InvalidHandle
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
from rclpy.task import Future, Task

# Tasks made with create_task belong to no node; rclpy's throttling lives in the logger object, so there is one.
LOGGER = get_logger("oxygen_ros.executor")
FUTURE_AWAIT = Future.__await__.__code__  # the generator a coroutine suspended in ``await future`` sits in
MAX_AWAIT_DEPTH = 64  # coroutines awaiting coroutines; deeper chains are polled as rclpy polls them
# Parking reads rclpy internals (a Task's coroutine and run lock, the executor's task list); an rclpy without them
# gets rclpy's own polling instead of a spin thread that fails.
TASK_INTERNALS = all(hasattr(Task(lambda: None), name) for name in ("_handler", "_task_lock"))


class Executor(MultiThreadedExecutor):
    def __init__(self, num_threads: int | None = None, **kwargs) -> None:
        super().__init__(num_threads, **kwargs)
        self._nodes_of: dict[Task, Node | None] = {}  # each task in _futures and the node it serves
        self._parked: dict[Task, tuple[Any, Node | None]] = {}  # tasks out of _tasks, with their entity and node
        self._parked_lock = threading.Lock()
        listed = isinstance(getattr(self, "_tasks", None), list) and hasattr(self, "_tasks_lock")
        self._parks = TASK_INTERNALS and listed

    def _spin_once_impl(self, timeout_sec: float | TimeoutObject | None = None, wait_condition=lambda: False) -> None:
        try:
            handler, entity, node = self.wait_for_ready_callbacks(timeout_sec, None, wait_condition)
        except (ExternalShutdownException, ShutdownException, TimeoutException, ConditionReachedException):
            return
        except Exception as exc:  # e.g. an entity that raised while being added to the wait set
            LOGGER.error(_report("building the wait set", exc), throttle_duration_sec=1.0)
            return
        self._drop_cancelled()
        if self._parked_now(handler, entity, node):
            return
        try:
            self._executor.submit(self._run, handler, entity, node)
        except RuntimeError:  # shut down while this pass waited (a spin thread racing ``shutdown``): nothing runs now
            handler.cancel()  # its coroutine closed, not left to be reported "never awaited" when collected
            return
        if handler not in self._nodes_of:
            self._futures.append(handler)
            self._nodes_of[handler] = node
        for future in [f for f in self._futures if f.done() or f.cancelled()]:  # a cancelled task is never done
            self._futures.remove(future)
            node = self._nodes_of.pop(future)
            if future.exception() is not None:
                (LOGGER if node is None else node.get_logger()).error(_report("a callback", future.exception()))
        os.sched_yield()

    def shutdown(self, timeout_sec: float | None = None, **kwargs) -> bool:
        """rclpy's, then every task that will now never start cancelled (its coroutine closed): a callback's
        handler made as the executor stopped, or a create_task coroutine not begun, would otherwise be reported
        "never awaited" when collected, from whatever code runs then."""
        finished = super().shutdown(timeout_sec, **kwargs)
        with self._tasks_lock:
            unstarted = [task for task, _, _ in self._tasks if _unstarted(task)]
        for task in unstarted:
            task.cancel()
        return finished

    def _run(self, task: Task, entity: Any, node: Node | None) -> None:
        """Run or resume ``task`` on a worker, then park it there if it now waits: parking it on a later pass of
        the spin thread would cost that pass, whose wait set (every entity of every node) is most of the spin
        thread's time in a graph of many nodes."""
        task()
        if not task.done() and not self._parked_now(task, entity, node):
            future = awaited_future(task)
            if future is not None and (future.done() or future.cancelled()):  # it ended before the park: resume
                self.wake()

    def _parked_now(self, task: Task, entity: Any, node: Node | None) -> bool:
        """``_park``, where parking is possible; a failure is logged and the task left to rclpy's polling."""
        if not self._parks:
            return False
        try:
            return self._park(task, entity, node)
        except Exception as exc:
            LOGGER.error(_report("parking a task", exc), throttle_duration_sec=1.0)
            return False

    def _park(self, task: Task, entity: Any, node: Node | None) -> bool:
        """Take ``task`` out of the task list while its coroutine waits on a pending future; that future's done
        callback puts it back. True too when it is parked already (a pass listed it before it was); False (run it
        now) when it is not waiting, or is running or queued to run (its lock is taken or the future it awaited
        completed meanwhile), or its future belongs to another executor that might not be spinning."""
        with self._parked_lock:
            if task in self._parked:
                return True
        if not task._task_lock.acquire(blocking=False):  # a worker is running it
            return False
        try:
            future = awaited_future(task)
            if future is None or future.done() or future.cancelled() or _owner(future) not in (None, self):
                return False
            with self._parked_lock:  # another thread may have parked it since the check above
                if task in self._parked:
                    return True
                self._parked[task] = (entity, node)
            try:
                with self._tasks_lock:
                    self._tasks = [listed for listed in self._tasks if listed[0] is not task]
            except BaseException:
                with self._parked_lock:
                    self._parked.pop(task, None)  # unless cancelled and dropped meanwhile
                raise
        finally:
            task._task_lock.release()
        future.add_done_callback(lambda _: self._unpark(task))  # runs at once if it ended meanwhile
        return True

    def _unpark(self, task: Task) -> None:
        with self._parked_lock:
            if (parked := self._parked.pop(task, None)) is None:  # dropped when it was cancelled
                return
        entity, node = parked
        if task.done() or task.cancelled():
            return
        with self._tasks_lock:
            self._tasks.append((task, entity, node))
        with contextlib.suppress(InvalidHandle):  # shut down meanwhile: its guard condition is gone
            self.wake()

    def _drop_cancelled(self) -> None:
        """Forget parked tasks cancelled meanwhile (``Task.cancel`` closed the coroutine), on each pass that runs a
        callback: rclpy drops a cancelled task from its list, and a parked one must not wait for a future that may
        never end."""
        with self._parked_lock:
            for task in [task for task in self._parked if task.cancelled()]:
                del self._parked[task]


def awaited_future(task: Task) -> Future | None:
    """The rclpy future ``task``'s coroutine is suspended on, following ``await`` through nested coroutines and
    generator-based awaitables; None when it has not started, is finished, or waits on anything else."""
    link = getattr(task, "_handler", None)
    for _ in range(MAX_AWAIT_DEPTH):
        if inspect.iscoroutine(link):
            link = link.cr_await
        elif inspect.isgenerator(link):
            if link.gi_code is FUTURE_AWAIT and link.gi_frame is not None:
                future = link.gi_frame.f_locals.get("self")
                return future if isinstance(future, Future) else None
            link = link.gi_yieldfrom
        else:
            return None
    return None


def _unstarted(task: Task) -> bool:
    """Whether ``task``'s coroutine was made and never run (False where rclpy keeps it elsewhere)."""
    coroutine = getattr(task, "_handler", None)
    return inspect.iscoroutine(coroutine) and inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED


def _owner(future: Future) -> Any:
    """The executor ``future`` schedules its done callbacks on (None: it runs them in the completing thread)."""
    ref = getattr(future, "_executor", None)
    return ref() if callable(ref) else None


def _report(what: str, exc: BaseException) -> str:
    trace = "".join(traceback.format_exception(exc)).rstrip()
    return f"{what} raised {type(exc).__name__}: {exc}; the executor keeps serving the rest\n{trace}"
