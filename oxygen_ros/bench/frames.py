"""Cross-frame serving (OxyGen, arXiv 2603.14371): a fixed-rate action stream and language decoding on one engine.

A control frame starts every ``period_s``: a new observation arrives with its action request(s) and the language
requests asked about it.  The paper compares three ways to serve a frame:

- ``baseline``: every request is isolated (its own ``cache_salt``, so nothing is shared) and run to completion, one
  after another: the action request's prefill, then each language request's own prefill and full decode.
- ``shared_kv``: the frame's requests run together, so the observation is prefilled once and shared by the action
  expert and the language requests; the frame ends when every language request has decoded all its tokens.
- ``continuous_batching`` (OxyGen): the observation is prefilled once and the action chunk served (the engine runs
  action steps alone), then ``steps_per_frame`` (k) decode steps in which every active language request, of this
  frame or an older one, advances one token; unfinished ones resume next frame.  ``steps_per_frame=0`` instead
  fills the frame's remaining time, judged by the slowest of the recently measured decode steps.

With ``realtime`` frame i starts at t0 + i * period (the driver sleeps when early) and continuous batching never
starts a decode step that would not end before the frame does; the other two modes finish their frame's work
whatever it costs, as in the paper, so the next frame starts late.  Whenever there is a period, action requests
carry the end of their frame as their engine deadline, so a chunk that cannot be served in its frame is answered
DEADLINE_EXCEEDED.  Without ``realtime`` frames run back to back, so a benchmark measures the frame rate each mode
can reach.

Every frame is recorded: its latency, whether its actions met the deadline, the language tokens decoded in it, and
each engine step with the task, request and phase (prefill, decode, denoise) it computed, for timelines.
"""

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum

from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, RequestOutput
from oxygen_ros.errors import EngineError, ErrorCode

PHASES = ("prefill", "denoise", "decode")
_MIN_DEADLINE_S = 1e-9  # a frame already over still gets a (past) deadline, so the engine drops its actions unserved


class Mode(str, Enum):  # a StrEnum (3.11+) spelled for Python 3.10
    BASELINE = "baseline"
    SHARED_KV = "shared_kv"
    CONTINUOUS_BATCHING = "continuous_batching"

    def __str__(self) -> str:  # as StrEnum: the value, in str() and in f-strings
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


@dataclass
class Frame:
    """One control tick's input: requests about the same new observation."""

    actions: list[GenerateRequest]
    language: list[GenerateRequest] = field(default_factory=list)


@dataclass
class StepSpan:
    """One engine step: when it ran and what it computed for whom."""

    start_s: float
    end_s: float
    denoise_s: float
    phase: str  # prefill if a request computed over a block of prompt (a new observation), else decode (see _step)
    work: list[tuple[str, str, str]]  # (task_id, request_id, prefill | decode | denoise)

    @property
    def forward_s(self) -> float:
        """The step's time outside action sampling: the forward pass plus its bookkeeping."""
        return self.end_s - self.start_s - self.denoise_s


@dataclass
class FrameRecord:
    index: int
    start_s: float  # when the frame began (realtime: when it was due)
    deadline_s: float  # the end of the frame's slot (perf_counter time); 0 = no period
    action_ids: list[str] = field(default_factory=list)
    end_s: float = 0.0
    outputs: list[RequestOutput] = field(default_factory=list)  # everything answered during this frame
    tokens_decoded: int = 0  # language tokens sampled in this frame, for any frame's requests
    steps: list[StepSpan] = field(default_factory=list)

    @property
    def latency_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def actions(self) -> list[RequestOutput]:
        return [o for o in self.outputs if o.request_id in self.action_ids]

    @property
    def deadline_met(self) -> bool:
        """Every action request of the frame answered in time (the engine marks late or dropped ones)."""
        actions = self.actions
        return len(actions) == len(self.action_ids) and all(o.ok for o in actions)

    def phase_s(self) -> dict[str, float]:
        """Seconds per phase; ``other`` is the rest of the latency (submission and image preprocessing, waiting)."""
        phases = dict.fromkeys(PHASES, 0.0)
        for step in self.steps:
            phases["denoise"] += step.denoise_s
            phases[step.phase] += step.forward_s
        return phases | {"other": self.latency_s - sum(phases.values())}


class FrameDriver:
    """Feeds frames to an engine in one of the three modes and records what happened in each."""

    def __init__(
        self,
        engine: Engine,
        mode: Mode | str,
        period_s: float = 0.0,
        steps_per_frame: int = 5,
        realtime: bool = False,
    ) -> None:
        self.engine = engine
        self.mode = Mode(mode)
        self.period_s = period_s
        self.steps_per_frame = steps_per_frame
        self.realtime = realtime
        if period_s < 0 or steps_per_frame < 0:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, "period_s and steps_per_frame must be >= 0")
        if (realtime or steps_per_frame == 0) and period_s <= 0:
            raise EngineError(
                ErrorCode.INVALID_ARGUMENT, "realtime frames and adaptive steps_per_frame (0) need a period_s > 0"
            )
        self.records: list[FrameRecord] = []
        self.outputs: dict[str, RequestOutput] = {}  # every answer so far, by request id
        self._decode_steps: deque[float] = deque(maxlen=8)  # recent decode step times: the adaptive budget's unit
        self._t0: float | None = None

    # --- frames -------------------------------------------------------------------------------------------------
    def run(self, frames: Iterable[Frame]) -> list[FrameRecord]:
        return [self.run_frame(frame) for frame in frames]

    def run_frame(self, frame: Frame) -> FrameRecord:
        index = len(self.records)
        start = self._begin(index)
        record = FrameRecord(index, start, start + self.period_s if self.period_s else 0.0)
        self.records.append(record)
        actions = [replace(g, request_id=g.request_id or f"frame{index}-act{j}") for j, g in enumerate(frame.actions)]
        language = [replace(g, request_id=g.request_id or f"frame{index}-txt{j}") for j, g in enumerate(frame.language)]
        record.action_ids = [g.request_id for g in actions]
        if self.mode is Mode.BASELINE:
            for greq in [*actions, *language]:
                self._run_until(record, self._submit(record, replace(greq, cache_salt=f"isolated/{greq.request_id}")))
        elif self.mode is Mode.SHARED_KV:
            self._run_until(record, self._submit(record, *actions) | self._submit(record, *language))
        else:
            action_ids = self._submit(record, *actions)
            self._submit(record, *language)
            self._run_until(record, action_ids)
            action_steps = len(record.steps)
            while self._room_for_a_step(record, len(record.steps) - action_steps) and self._step(record):
                pass
        record.end_s = time.perf_counter()
        return record

    def drain(self) -> FrameRecord:
        """Run the language requests still active after the last frame to completion (not a frame: not recorded)."""
        record = FrameRecord(len(self.records), time.perf_counter(), 0.0)
        while self._step(record):
            pass
        record.end_s = time.perf_counter()
        return record

    def cancel(self, request_id: str) -> RequestOutput:
        """Abort a request of any frame; its blocks are free when this returns."""
        self.outputs[request_id] = out = self.engine.abort(request_id)
        return out

    # --- internals ----------------------------------------------------------------------------------------------
    def _begin(self, index: int) -> float:
        """The frame's start: now, or in realtime its due time (sleeping until then if early)."""
        now = time.perf_counter()
        if not self.realtime:
            return now
        if self._t0 is None:
            self._t0 = now
        due = self._t0 + index * self.period_s
        if due > now:
            time.sleep(due - now)
        return due

    def _submit(self, record: FrameRecord, *requests: GenerateRequest) -> set[str]:
        """Submit; a refused request (e.g. RESOURCE_EXHAUSTED) is answered in the record, the stream goes on."""
        accepted = set()
        for greq in requests:
            if greq.request_id in record.action_ids and record.deadline_s:
                greq = replace(greq, deadline_s=max(record.deadline_s - time.perf_counter(), _MIN_DEADLINE_S))
            try:
                accepted.add(self.engine.submit(greq))
            except EngineError as exc:
                refused = RequestOutput(
                    greq.request_id, greq.task_id, greq.task_type, error_code=exc.code, message=exc.message
                )
                self._answer(record, refused)
        return accepted

    def _run_until(self, record: FrameRecord, request_ids: set[str]) -> None:
        while not request_ids <= self.outputs.keys() and self._step(record):
            pass

    def _room_for_a_step(self, record: FrameRecord, decode_steps: int) -> bool:
        """Continuous batching: k decode steps per frame, or (adaptive, or realtime) as many as fit before its end."""
        if not self.engine.has_unfinished:
            return False
        if self.steps_per_frame and decode_steps >= self.steps_per_frame:
            return False
        if record.deadline_s and (self.realtime or not self.steps_per_frame):
            step_s = max(self._decode_steps, default=0.0)
            return time.perf_counter() + step_s <= record.deadline_s
        return True

    def _step(self, record: FrameRecord) -> bool:
        """One engine step, recorded; False when the engine had nothing to do."""
        engine = self.engine
        tokens_before = {r.request_id: len(r.output_token_ids) for r in engine.requests.values()}
        served_before = {r.request_id for r in engine.requests.values() if r.actions is not None}
        start = time.perf_counter()
        outputs = engine.step()
        end = time.perf_counter()
        for out in outputs:
            self._answer(record, out)
        batch = engine.last_batch
        if not batch.requests:
            return bool(outputs)
        work = []
        for req, n in zip(batch.requests, batch.num_new_tokens, strict=True):
            work.append((req.task_id, req.request_id, "prefill" if n > 1 else "decode"))
            if req.actions is not None and req.request_id not in served_before:
                work.append((req.task_id, req.request_id, "denoise"))
        # Joining a shared prefix computes only its uncached tail (at most a block): that costs about a decode step.
        phase = "prefill" if max(batch.num_new_tokens) > engine.config.block_size else "decode"
        span = StepSpan(start, end, batch.denoise_s, phase, work)
        record.steps.append(span)
        record.tokens_decoded += sum(len(r.output_token_ids) - tokens_before[r.request_id] for r in batch.requests)
        if phase == "decode":
            self._decode_steps.append(span.forward_s)
        return True

    def _answer(self, record: FrameRecord, out: RequestOutput) -> None:
        record.outputs.append(out)
        self.outputs[out.request_id] = out
