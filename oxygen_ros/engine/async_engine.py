"""The engine on its own thread, so callers on any thread (ROS callbacks, a CLI) can submit without blocking.

The Engine is not thread-safe and a step can take a whole forward pass, so one thread owns it: callers only append
commands to an inbox under a short lock and get a ``concurrent.futures.Future``; the thread applies the commands
between steps, steps while work exists and sleeps on a condition variable otherwise. Every failure a caller can
cause comes back as a RequestOutput with ``error_code`` set, never as an exception in the caller's thread, and an
exception inside a step is contained: the thread keeps serving with a clean pool (see ``_recover``). With a
FramePacer the thread holds language steps that would delay a chunk an action stream is about to ask for.
"""

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TypeVar

from oxygen_ros.engine.engine import Engine, StepFailed
from oxygen_ros.engine.io import GenerateRequest, RequestOutput
from oxygen_ros.engine.pacing import FramePacer
from oxygen_ros.engine.detokenizer import IncrementalDetokenizer
from oxygen_ros.engine.stats import ServingStats, error_output
from oxygen_ros.errors import EngineError, ErrorCode

T = TypeVar("T")
TextCallback = Callable[[str, int], None]  # (text added since the last call, tokens generated so far)
_MIN_DEADLINE_S = 1e-9  # a deadline already over while the request waited: the engine answers it at once
CANCELLED_EARLY_KEPT = 1024  # ids cancelled before their request reached the engine thread, kept for it
STATS_MAX_AGE_S = 0.1  # during pure decode the stats snapshot is retaken at most this often (see _publish)
log = logging.getLogger(__name__)


def _keep_newest(kept: OrderedDict, key: str, value: object) -> None:
    """``kept[key] = value`` as its newest entry, the oldest dropped beyond CANCELLED_EARLY_KEPT."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > CANCELLED_EARLY_KEPT:
        kept.popitem(last=False)


class AsyncEngine:
    """Owns an Engine and a thread that steps it; every public method is thread-safe and returns at once."""

    def __init__(self, engine: Engine, name: str = "oxygen-engine", pacer: FramePacer | None = None) -> None:
        self.engine = engine  # touched only by the engine thread once it runs
        self.pacer = pacer  # engine thread only, like the engine
        self._cv = threading.Condition()
        self._inbox: list[Callable[[], None]] = []
        # requests submitted and not yet answered (callers' side, under the lock): each may hold decoded images
        # until the engine thread takes it, so the inbox is bounded as the engine's queue and batch are
        self._in_flight = 0
        self.max_in_flight = engine.config.max_queue + engine.config.max_num_seqs
        self._stopping = False
        self._futures: dict[str, tuple[Future[RequestOutput], float]] = {}  # engine thread only: (future, inbox ms)
        self._streams: dict[str, _Stream] = {}  # engine thread only: requests whose text is streamed
        # engine thread only: ids cancelled before their request reached this thread (a caller's cancel may overtake
        # its submit, which compiles a grammar first): the request is answered CANCELLED when it comes
        self._cancelled_early: OrderedDict[str, None] = OrderedDict()
        self._cancelled_tasks: OrderedDict[str, float] = OrderedDict()  # engine thread only: task -> when cancelled
        self._completed = 0
        self._generated_tokens = 0
        self._errors: dict[str, int] = {}
        self._last_error = ""
        self._ready: list[tuple[Future[RequestOutput], RequestOutput]] = []  # answers not yet handed out
        self._stats = self._snapshot()
        self._stats_at = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # --- callers' side ------------------------------------------------------------------------------------------
    def submit(self, greq: GenerateRequest, on_text: TextCallback | None = None, text_every: int = 1,
               received_at: float | None = None) -> Future[RequestOutput]:  # fmt: skip
        """Queue a request; the future always completes with a RequestOutput (``error_code`` set on failure).

        ``on_text(piece, tokens)`` is called on the engine thread (keep it short) with the answer's new text at most
        every ``text_every`` tokens and once more with the rest just before the future completes: the pieces add up
        to the result's text exactly. ``received_at``: when the caller got the request (``time.perf_counter``;
        default now): its deadline runs from then, and a cancel of its task since then cancels it. The future cannot
        be cancelled (``abort`` cancels a request): one cancelled would break the engine thread's answer to it."""
        future: Future[RequestOutput] = _running()
        now = time.perf_counter()  # the engine thread may be mid-step for a while: its wait counts
        arrival = now if received_at is None else min(received_at, now)
        with self._cv:
            busy = self._busy()
            self._in_flight += not busy
        if busy:
            future.set_result(error_output(greq, ErrorCode.RESOURCE_EXHAUSTED, busy))
            return future
        future.add_done_callback(self._answered)
        try:
            self.engine.inputs.prepare_constraint(greq)  # a grammar compiles here, never on the engine thread
        except EngineError as exc:
            future.set_result(error_output(greq, exc.code, exc.message))
            return future
        except Exception as exc:  # a bug in the grammar library's handling: this request fails, nothing else
            log.exception("compiling a constraint failed")
            future.set_result(error_output(greq, ErrorCode.INTERNAL, f"constraint: {type(exc).__name__}: {exc}"))
            return future
        stream = None if on_text is None else _Stream(on_text, max(1, text_every))
        if not self._post(lambda: self._submit(greq, future, arrival, stream)):
            future.set_result(error_output(greq, ErrorCode.UNAVAILABLE, "the engine is shut down"))
        return future

    def busy(self) -> str:
        """Why a request submitted now would be refused RESOURCE_EXHAUSTED ('' = it would be taken): a caller asks
        before it decodes a request's images."""
        with self._cv:
            return self._busy()

    def _busy(self) -> str:
        if self._in_flight < self.max_in_flight:
            return ""
        return (f"{self._in_flight} requests in flight, the most this engine holds (max_queue "
                f"{self.engine.config.max_queue} waiting + max_num_seqs {self.engine.config.max_num_seqs} running); "
                "retry later")  # fmt: skip

    def _answered(self, _future: Future) -> None:
        with self._cv:
            self._in_flight -= 1

    def abort(self, request_id: str) -> None:
        """Cancel a request (its future completes with CANCELLED), also one whose submit has not reached the engine
        thread yet (the latest CANCELLED_EARLY_KEPT unknown ids are kept: a finished request's too, so an id must not
        be submitted again once aborted)."""
        self._post(lambda: self._cancel(request_id))

    def _cancel(self, request_id: str) -> None:
        if not request_id:  # a request without an id cannot be named again
            return
        if request_id in self.engine.requests or request_id in self._futures:
            self._abort(request_id, ErrorCode.CANCELLED, "cancelled by the caller")
            return
        _keep_newest(self._cancelled_early, request_id, None)  # (or finished: its id never comes again)

    def abort_task(self, task_id: str) -> Future[int]:
        """Cancel every request of ``task_id`` submitted so far (a goal ended: its narration is no longer wanted),
        also one its caller received before this and submits later (decoding its images meanwhile); the future gives
        how many were cancelled in the engine."""

        asked_at = time.perf_counter()

        def abort_all_of_task(engine: Engine) -> int:
            _keep_newest(self._cancelled_tasks, task_id, asked_at)  # (its requests received before, on their way)
            ids = [rid for rid, req in engine.requests.items() if req.task_id == task_id]
            failed = ""
            for request_id in ids:  # each one, whatever freeing another's blocks met
                try:
                    self._abort(request_id, ErrorCode.CANCELLED, f"task {task_id!r} was cancelled")
                except Exception as exc:
                    log.exception("aborting %s failed", request_id)
                    failed = f"aborting {request_id} failed: {type(exc).__name__}: {exc}"
            if failed:  # engine internals raised: as after a failed step
                self._recover(failed)
            return len(ids)

        return self.call(abort_all_of_task)

    def call(self, fn: Callable[[Engine], T]) -> Future[T]:
        """Run ``fn(engine)`` on the engine thread between steps (consistent reads of pool internals)."""
        future: Future[T] = _running()

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
        """Abort everything (futures complete with CANCELLED), persist the KV tiers (``Engine.close``), stop the
        thread and wait for it."""
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
                try:
                    engine.close()
                except Exception:  # e.g. the disk tier's folder went away: the answers must still go out
                    log.exception("closing the engine (persisting its KV tiers) failed")
                self._publish()
                return
            hold, cap = self._plan() if engine.has_unfinished else (0.0, None)
            if engine.has_unfinished and hold <= 0:
                self._step(cap)
            self._publish()
            if hold > 0:  # language for a chunk due soon, or a chunk for those due with it (or a new command)
                held_from = time.perf_counter()
                with self._cv:
                    if not (self._inbox or self._stopping):
                        self._cv.wait(hold)
                self.pacer.held_s += time.perf_counter() - held_from

    def _plan(self) -> tuple[float, int | None]:
        """How long to hold the next step (language work for a chunk due soon, owed chunks for their peers' due with
        them: FramePacer), and its prefill cap (Scheduler.schedule): a step whose prompts would still run when a chunk
        is due becomes a decode-only step (cap 0) where that one fits."""
        if self.pacer is None:
            return 0.0, None
        now = time.perf_counter()
        cap = self.pacer.prefill_cap(now)
        if self.engine.owes_actions:
            return self.pacer.coalesce_s(now), cap
        hold = self.pacer.hold_s(now, self.engine.language_step_tokens(cap))
        decode_only = self.engine.language_step_tokens(0)  # the decode rows alone
        if hold > 0 and decode_only and self.pacer.hold_s(now, decode_only) <= 0:
            return 0.0, 0
        return hold, cap

    def _submit(self, greq: GenerateRequest, future: Future[RequestOutput], arrival: float,
                stream: "_Stream | None" = None) -> None:  # fmt: skip
        """The time a request waited in the inbox (behind a running step) counts: its deadline started at the
        caller's submit, and its queue and latency times include the wait."""
        waited_s = time.perf_counter() - arrival
        if greq.request_id in self._cancelled_early:
            del self._cancelled_early[greq.request_id]
            self._complete(future, waited_s * 1e3, error_output(greq, ErrorCode.CANCELLED, "cancelled by the caller "
                                                                "before it reached the engine"))  # fmt: skip
            return
        if arrival <= self._cancelled_tasks.get(greq.task_id, -math.inf):
            self._complete(future, waited_s * 1e3, error_output(greq, ErrorCode.CANCELLED, f"task {greq.task_id!r} "
                                                                "was cancelled after it was received"))  # fmt: skip
            return
        asked_deadline_s = greq.deadline_s  # the chunk's window as its caller set it (the pacer's)
        if greq.deadline_s > 0:
            greq = replace(greq, deadline_s=max(greq.deadline_s - waited_s, _MIN_DEADLINE_S))
        try:
            request_id = self.engine.submit(greq)
        except EngineError as exc:
            self._complete(future, waited_s * 1e3, error_output(greq, exc.code, exc.message))
            return
        except Exception as exc:  # a bug in validation: this request fails, the engine is untouched
            log.exception("engine.submit failed")
            self._last_error = f"submit: {type(exc).__name__}: {exc}"
            self._complete(future, waited_s * 1e3, error_output(greq, ErrorCode.INTERNAL, self._last_error))
            return
        if greq.want_actions and self.pacer is not None:  # (a request refused above asks for no chunks)
            self.pacer.action_arrived(greq.task_id, arrival, asked_deadline_s)
        self._futures[request_id] = (future, waited_s * 1e3)
        if stream is not None:
            stream.text = self.engine.requests[request_id].detokenizer
            self._streams[request_id] = stream

    def _step(self, prefill_cap: int | None) -> None:
        served_actions = self.engine.owes_actions
        start = time.perf_counter()
        try:
            outputs = self.engine.step(prefill_cap)
        except StepFailed as failed:
            log.exception("engine step failed")
            self._answer(failed.finished)  # finished before the failure: complete, answered as they are
            self._recover(str(failed))
            return
        if self.pacer is not None:
            self.pacer.step_done(served_actions, time.perf_counter() - start, self.engine.last_batch.total_tokens)
        for request_id, stream in self._streams.items():
            req = self.engine.requests.get(request_id)
            if req is not None and len(req.output_token_ids) - stream.reported >= stream.every:
                stream.report(stream.text.delta(req.output_token_ids), len(req.output_token_ids))
        self._answer(outputs)

    def _answer(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            pending = self._futures.pop(out.request_id, None)
            if pending is not None:
                self._complete(*pending, out)

    def _recover(self, reason: str) -> None:
        """After engine internals raised, no request's state (tokens, block table, partly written KV) can be trusted:
        abort every request, answer each INTERNAL, and drop the prefix cache so no later request reuses suspect KV."""
        self._last_error = reason
        self._abort_all(ErrorCode.INTERNAL, reason)
        try:
            self.engine.pool.reset_prefix_cache()
            self.engine.check_invariants()
        except Exception as exc:  # every request left the engine above, freed or not: no block has an owner now
            log.warning("the KV pool was inconsistent after a failed step (%s): every block reclaimed", exc)
            self.engine.pool.reclaim_all()
            self.engine.check_invariants()

    def _abort(self, request_id: str, code: ErrorCode, message: str) -> None:
        pending = self._futures.pop(request_id, None)
        try:
            out = self.engine.abort(request_id)
        except EngineError:  # not in the engine (finished, never admitted, or already aborted)
            if pending is None:
                return
            out = RequestOutput(request_id=request_id, task_id="", task_type="")
        except Exception as exc:  # freeing its blocks failed: its caller is answered all the same, then it is raised
            if pending is not None:
                failed = RequestOutput(request_id=request_id, task_id="", task_type="")
                failed.error_code, failed.message = ErrorCode.INTERNAL, f"abort: {type(exc).__name__}: {exc}"
                self._complete(*pending, failed)
            raise
        if pending is not None:
            out.error_code, out.message = code, message
            self._complete(*pending, out)

    def _abort_all(self, code: ErrorCode, message: str) -> None:
        for request_id in [*self.engine.requests, *self._futures]:
            try:
                self._abort(request_id, code, message)
            except Exception:  # freeing one request's blocks failed; keep freeing the others
                log.exception("aborting %s failed", request_id)

    def _complete(self, future: Future[RequestOutput], waited_ms: float, out: RequestOutput) -> None:
        stream = self._streams.pop(out.request_id, None)
        if stream is not None and stream.text is not None:
            stream.report(stream.text.final_delta(out.text), out.generated_tokens, final=True)
        out.queue_ms += waited_ms
        out.latency_ms += waited_ms
        self._generated_tokens += out.generated_tokens
        if out.error_code is None:
            self._completed += 1
        else:
            self._errors[out.error_code.value] = self._errors.get(out.error_code.value, 0) + 1
        self._ready.append((future, out))

    def _publish(self) -> None:
        """Refresh the stats snapshot if answers go out, the engine goes idle, a step prefilled (requests came in:
        samplers of the pool's use see them) or the snapshot is older than ``STATS_MAX_AGE_S``, then hand out the
        answers: a caller holding its answer sees stats that already count it.  A snapshot walks every block table,
        which a pure decode step of many requests should not pay for."""
        now = time.perf_counter()
        engine = self.engine
        if (self._ready or not engine.has_unfinished or not engine.last_batch.is_decode
                or now - self._stats_at >= STATS_MAX_AGE_S):  # fmt: skip
            self._stats, self._stats_at = self._snapshot(), now
        ready, self._ready = self._ready, []
        for future, out in ready:
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
            paced_hold_s=self.pacer.held_s if self.pacer else 0.0,
            generated_tokens=self._generated_tokens,
            errors=dict(self._errors),
            last_error=self._last_error,
        )


@dataclass
class _Stream:
    """A streamed request's callback and how much of its answer it has been given."""

    callback: TextCallback
    every: int
    text: IncrementalDetokenizer | None = None  # the request's own (a want_text request's)
    reported: int = 0  # tokens covered by the last call

    def report(self, piece: str, tokens: int, final: bool = False) -> None:
        self.reported = tokens
        if piece or final:
            try:
                self.callback(piece, tokens)
            except Exception:  # the caller's callback failed: its request still completes
                log.exception("a text stream callback raised")


def _running() -> Future:
    """A future its caller cannot cancel (``cancel()`` returns False): it is set by the engine thread once."""
    future: Future = Future()
    future.set_running_or_notify_cancel()
    return future
