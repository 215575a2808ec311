"""Frame pacing for the serving loop: language steps keep out of the way of action streams that arrive from outside.

In the FrameDriver (benchmarks) the frame clock is ours. In the inference node the action requests come from task
nodes at their own rates, so the engine thread cannot know when the next chunk is owed unless it learns it: the
pacer keeps each stream's recent arrivals, takes the median gap as its period and predicts the next arrival. Before
a language step the engine thread asks ``hold_s``: a step that would still be running when a chunk is due is held
until that chunk arrives, which is the paper's frame seen from the server: the action's prefill and denoising first,
then decoding fills the rest of the frame (adaptive k). A step is judged by the recent language steps at least as
large (the slowest of those up to twice the smallest such), or, when it computes more tokens than any of them, by the
largest one's cost per token: a decode step is not judged by last frame's prefill. Recent steps are kept per size
class (powers of two), so a prefill is judged by the last prefills, not by a run of decode steps whose cost per token
is mostly their fixed overhead (a 5-row decode step at 2 ms per token would make a 256-token frame look like 0.5 s
when it takes 0.2, and hold it until after the chunk, which then had to prefill the frame itself); a step older than
``STEP_MEMORY`` language steps is forgotten, so a slow one (a cold start) does not judge its class forever. The first
language step after a chunk is never held: it has the whole frame, and if it does not fit in that it never will
(holding it would starve it). With ``steps_per_frame`` k > 0, language instead takes exactly k steps per frame and
then waits for the next chunk.

A chunk can also be asked for while a language step runs (the stream's period not yet learnt, or a jittery client):
it waits out that step. So while a stream is live, ``prefill_cap`` bounds the prompt tokens of a language step to
what runs in half the slack the stream's window leaves after its own action step (the window: the request's
deadline, else the period), and the scheduler spreads queued prompts over several short steps (Scheduler). When
a step with a prompt would be held but its decode rows alone fit before the chunk, the serving thread runs those
(AsyncEngine._plan): answers keep streaming between chunks.

Streams that ask at the same moment (three arms on one control clock) arrive a few milliseconds apart, and an action
step starts as soon as one chunk is owed: the others then waited for a second step (one chunk 91 ms, the other two
145 ms, against 176 ms for all three at once, pi05-causal-tiny on this CPU). So an owed chunk waits up to
``COALESCE_S`` after it arrived for the live streams whose next chunk is predicted by then (``coalesce_s``), and
they share one step.

A stream that misses its slot by more than ``grace`` periods no longer holds anyone (a task that stopped sending
must not stall language work), and a stream not heard from for ``STALE_PERIODS`` periods is forgotten. Action work
is never held for language work, only for the other chunks due with it (``COALESCE_S`` at most).
"""

import statistics
from collections import deque
from dataclasses import dataclass, field

HISTORY = 8  # arrivals kept per stream (the median gap tolerates a few late or early chunks), steps per size class
STALE_PERIODS = 3.0
ORPHAN_S = 60.0  # a stream with one arrival and no deadline (no window) is forgotten after this
STEP_MEMORY = 1000  # language steps a timed step is remembered for (~10 s of decoding at 100 steps per second)
COALESCE_S = 0.01  # the longest an owed chunk waits for the chunks of other streams due with it


@dataclass
class _Stream:
    arrivals: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY + 1))
    deadline_s: float = 0.0  # the last request's deadline (its chunk window); 0 = none

    def period(self) -> float | None:
        if len(self.arrivals) < 2:
            return None
        times = list(self.arrivals)
        return statistics.median(b - a for a, b in zip(times, times[1:], strict=False))

    def next_due(self) -> tuple[float, float] | None:
        """(when the next chunk is due, the period), once the stream has a period."""
        period = self.period()
        return None if not period else (self.arrivals[-1] + period, period)

    def window(self) -> float | None:
        """The time a chunk of this stream has: its deadline, else its period; None while neither is known."""
        return self.deadline_s or self.period()

    def stale(self, now: float) -> bool:
        heard = max(self.deadline_s, self.period() or 0.0)
        return now - self.arrivals[-1] > (STALE_PERIODS * heard if heard else ORPHAN_S)


class FramePacer:
    """Decides whether the engine thread may start a language step now (see the module docstring)."""

    def __init__(self, steps_per_frame: int = 0, grace: float = 0.25) -> None:
        if steps_per_frame < 0 or grace < 0:
            raise ValueError("steps_per_frame and grace must be >= 0")
        self.steps_per_frame = steps_per_frame
        self.grace = grace
        self._streams: dict[str, _Stream] = {}
        self._language_steps = 0  # since the last action step
        self._steps_by_size: dict[int, deque[tuple[int, float, int]]] = {}  # recent language steps (tokens, seconds,
        # their number), by tokens.bit_length()
        self._language_count = 0  # language steps timed so far
        self._action_steps: deque[float] = deque(maxlen=HISTORY)  # recent action steps' seconds
        self._first_owed: float | None = None  # when the first chunk not yet served arrived
        self.held_s = 0.0  # total time work was held (language for a chunk, a chunk for its peers), for stats

    def action_arrived(self, stream: str, now: float, deadline_s: float = 0.0) -> None:
        """An action request of ``stream`` (its task id) was submitted at ``now``, due within ``deadline_s``."""
        entry = self._streams.setdefault(stream, _Stream())
        entry.arrivals.append(now)
        entry.deadline_s = deadline_s
        if self._first_owed is None:
            self._first_owed = now

    def step_done(self, served_actions: bool, duration_s: float, tokens: int = 1) -> None:
        if served_actions:
            self._language_steps = 0
            self._first_owed = None
            self._action_steps.append(duration_s)
        else:
            self._language_steps += 1
            self._language_count += 1
            tokens = max(tokens, 1)
            steps = self._steps_by_size.setdefault(tokens.bit_length(), deque(maxlen=HISTORY))
            steps.append((tokens, duration_s, self._language_count))

    @property
    def _steps(self) -> list[tuple[int, float]]:
        """The remembered language steps (tokens, seconds): each size class's last ``HISTORY`` of the last
        ``STEP_MEMORY``."""
        oldest = self._language_count - STEP_MEMORY
        return [(t, d) for steps in self._steps_by_size.values() for t, d, number in steps if number > oldest]

    def estimate_s(self, tokens: int) -> float:
        """A conservative guess of a language step computing ``tokens`` tokens, from the recent ones."""
        steps = self._steps
        if not steps:
            return 0.0
        larger = [(t, d) for t, d in steps if t >= tokens]
        if larger:
            nearest = min(t for t, _ in larger)
            return max(d for t, d in larger if t <= 2 * nearest)
        return tokens * self._seconds_per_token(steps)

    @staticmethod
    def _seconds_per_token(steps: list[tuple[int, float]]) -> float:
        """The largest recent language step's cost per token (the slowest of the largest, if tied)."""
        most = max(t for t, _ in steps)
        return max(d for t, d in steps if t == most) / most

    def prefill_cap(self, now: float) -> int | None:
        """The most prompt tokens a language step may compute now: what runs in half of the slack the tightest live
        stream's window leaves after an action step (a chunk asked for at the worst moment waits out this step, then
        runs its own). None (no cap) without a live stream with a window, before a language step was timed, or when an
        action step alone outlasts the window."""
        windows = [w for w in (s.window() for s in self._live(now)) if w]
        steps = self._steps
        if not windows or not steps:
            return None
        slack = min(windows) - (max(self._action_steps) if self._action_steps else 0.0)
        per_token = self._seconds_per_token(steps)
        if slack <= 0 or per_token <= 0:  # the chunk misses its window anyway: capping language would not save it
            return None
        return max(1, int(slack / 2 / per_token))

    def hold_s(self, now: float, tokens: int = 1) -> float:
        """How long to hold a language step computing ``tokens`` tokens from ``now``; 0 = step now. Waking early
        (an arrival) is expected."""
        due = self._next_due(now)
        if due is None:
            return 0.0
        next_due, period = due
        release = next_due + self.grace * period  # a chunk this late no longer holds language work
        if now >= release:
            return 0.0
        if self.steps_per_frame:
            return release - now if self._language_steps >= self.steps_per_frame else 0.0
        if self._language_steps == 0:
            return 0.0
        return release - now if now + self.estimate_s(tokens) > next_due else 0.0

    def coalesce_s(self, now: float) -> float:
        """How long to hold the owed chunks from ``now`` so that the live streams predicted to ask within
        ``COALESCE_S`` of the first one's arrival share their step; 0 = step now (none is expected by then)."""
        if self._first_owed is None:
            return 0.0
        limit = self._first_owed + COALESCE_S
        if now >= limit:
            return 0.0
        for stream in self._live(now):
            due = stream.next_due()
            if stream.arrivals[-1] < self._first_owed and due is not None and due[0] <= limit:
                return limit - now
        return 0.0

    def _live(self, now: float) -> list[_Stream]:
        """The streams still heard from; forgets the stale ones."""
        for name in [name for name, stream in self._streams.items() if stream.stale(now)]:
            del self._streams[name]
        return list(self._streams.values())

    def _next_due(self, now: float) -> tuple[float, float] | None:
        """The earliest next chunk over the live streams that still hold language work (a stream past its slot by
        more than ``grace`` periods holds no one: one that stopped, live for as long as its deadline lets it be,
        must not hide the streams still asking), with that stream's period."""
        dues = [due for due in (s.next_due() for s in self._live(now)) if due is not None]
        return min((due for due in dues if now < due[0] + self.grace * due[1]), default=None)
