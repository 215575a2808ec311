"""The engine on its own thread, so callers on any thread (ROS callbacks, a CLI) can submit without blocking.

The Engine is not thread-safe and a step can take a whole forward pass, so one thread owns it: callers only append
commands to an inbox under a short lock and get a ``concurrent.futures.Future``; the thread applies the commands
between steps, steps while work exists and sleeps on a condition variable otherwise. Every failure a caller can
cause comes back as a RequestOutput with ``error_code`` set, never as an exception in the caller's thread, and an
exception inside a step is contained: the thread keeps serving with a clean pool (see ``_recover``).
"""

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TypeVar

from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, PoolStats, RequestOutput
from oxygen_ros.errors import EngineError, ErrorCode

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServingStats:
    """A consistent snapshot taken by the engine thread between steps (what stats and diagnostics report)."""

    pool: PoolStats
    device: str  # torch device type the pool lives on: cpu | cuda
    max_queue: int
    prefix_hits: int  # full prompt blocks found in the prefix cache since start
    prefix_queries: int  # full prompt blocks looked up since start
    completed: int  # requests answered without error
    errors: dict[str, int] = field(default_factory=dict)  # requests answered with each error code
    last_error: str = ""  # the latest exception contained by the engine thread

    @property
    def deadline_misses(self) -> int:
        return self.errors.get(ErrorCode.DEADLINE_EXCEEDED.value, 0)

    @property
    def internal_errors(self) -> int:
        return self.errors.get(ErrorCode.INTERNAL.value, 0)


def error_output(greq: GenerateRequest, code: ErrorCode, message: str) -> RequestOutput:
    return RequestOutput(
        request_id=greq.request_id, task_id=greq.task_id, task_type=greq.task_type, error_code=code, message=message
    )


class AsyncEngine:
    """Owns an Engine and a thread that steps it; every public method is thread-safe and returns at once."""

    def __init__(self, engine: Engine, name: str = "oxygen-engine") -> None:
        self.engine = engine  # touched only by the engine thread once it runs
        self._cv = threading.Condition()
        self._inbox: list[Callable[[], None]] = []
        self._stopping = False
        self._futures: dict[str, Future[RequestOutput]] = {}  # engine thread only
        self._completed = 0
        self._errors: dict[str, int] = {}
        self._last_error = ""
        self._stats = self._snapshot()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # --- callers' side ------------------------------------------------------------------------------------------
    def submit(self, greq: GenerateRequest) -> Future[RequestOutput]:
        """Queue a request; the future always completes with a RequestOutput (``error_code`` set on failure)."""
        future: Future[RequestOutput] = Future()
        if not self._post(lambda: self._submit(greq, future)):
            future.set_result(error_output(greq, ErrorCode.UNAVAILABLE, "the engine is shut down"))
        return future

    def abort(self, request_id: str) -> None:
        """Cancel a request (its future completes with CANCELLED); unknown or finished ids are ignored."""
        self._post(lambda: self._abort(request_id, ErrorCode.CANCELLED, "cancelled by the caller"))

    def call(self, fn: Callable[[Engine], T]) -> Future[T]:
        """Run ``fn(engine)`` on the engine thread between steps (consistent reads of pool internals)."""
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(fn(self.engine))
            except Exception as exc:  # the caller's function failed, not the engine: hand it back
                future.set_exception(exc)

        if not self._post(run):
            future.set_exception(EngineError(ErrorCode.UNAVAILABLE, "the engine is shut down"))
        return future

    def stats(self) -> ServingStats:
        """The latest snapshot; refreshed after every step and command, so it is current whenever idle."""
        return self._stats

    def shutdown(self, timeout: float | None = None) -> None:
        """Abort everything (futures complete with CANCELLED), stop the thread and wait for it."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _post(self, command: Callable[[], None]) -> bool:
        with self._cv:
            if self._stopping:
                return False
            self._inbox.append(command)
            self._cv.notify()
            return True

    # --- engine thread ------------------------------------------------------------------------------------------
    def _run(self) -> None:
        engine = self.engine
        while True:
            with self._cv:
                while not (self._inbox or self._stopping or engine.has_unfinished):
                    self._cv.wait()
                commands, self._inbox = self._inbox, []
                stopping = self._stopping
            for command in commands:
                try:
                    command()
                except Exception as exc:  # engine internals raised outside a step (e.g. while freeing blocks)
                    log.exception("engine command failed")
                    self._recover(f"engine command failed: {type(exc).__name__}: {exc}")
            if stopping:
                self._abort_all(ErrorCode.CANCELLED, "the engine is shutting down")
                self._stats = self._snapshot()
                return
            if engine.has_unfinished:
                self._step()
            self._stats = self._snapshot()

    def _submit(self, greq: GenerateRequest, future: Future[RequestOutput]) -> None:
        try:
            request_id = self.engine.submit(greq)
        except EngineError as exc:
            self._complete(future, error_output(greq, exc.code, exc.message))
            return
        except Exception as exc:  # a bug in validation: this request fails, the engine is untouched
            log.exception("engine.submit failed")
            self._last_error = f"submit: {type(exc).__name__}: {exc}"
            self._complete(future, error_output(greq, ErrorCode.INTERNAL, self._last_error))
            return
        self._futures[request_id] = future

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as exc:
            log.exception("engine step failed")
            self._recover(f"engine step failed: {type(exc).__name__}: {exc}")
            return
        for out in outputs:
            future = self._futures.pop(out.request_id, None)
            if future is not None:
                self._complete(future, out)

    def _recover(self, reason: str) -> None:
        """After engine internals raised, no request's state (tokens, block table, partly written KV) can be trusted:
        abort every request, answer each INTERNAL, and drop the prefix cache so no later request reuses suspect KV."""
        self._last_error = reason
        self._abort_all(ErrorCode.INTERNAL, reason)
        try:
            self.engine.pool.reset_prefix_cache()
            self.engine.check_invariants()
        except Exception as exc:
            log.exception("the KV pool is inconsistent after a failed step")
            self._last_error = f"{reason}; the KV pool is inconsistent: {exc}"

    def _abort(self, request_id: str, code: ErrorCode, message: str) -> None:
        future = self._futures.pop(request_id, None)
        try:
            out = self.engine.abort(request_id)
        except EngineError:  # not in the engine (finished, never admitted, or already aborted)
            if future is None:
                return
            out = RequestOutput(request_id=request_id, task_id="", task_type="")
        if future is not None:
            out.error_code, out.message = code, message
            self._complete(future, out)

    def _abort_all(self, code: ErrorCode, message: str) -> None:
        for request_id in [*self.engine.requests, *self._futures]:
            try:
                self._abort(request_id, code, message)
            except Exception:  # freeing one request's blocks failed; keep freeing the others
                log.exception("aborting %s failed", request_id)

    def _complete(self, future: Future[RequestOutput], out: RequestOutput) -> None:
        if out.error_code is None:
            self._completed += 1
        else:
            self._errors[out.error_code.value] = self._errors.get(out.error_code.value, 0) + 1
        future.set_result(out)

    def _snapshot(self) -> ServingStats:
        engine = self.engine
        return ServingStats(
            pool=engine.stats(),
            device=engine.device.type,
            max_queue=engine.config.max_queue,
            prefix_hits=engine.pool.prefix_hits,
            prefix_queries=engine.pool.prefix_queries,
            completed=self._completed,
            errors=dict(self._errors),
            last_error=self._last_error,
        )
