"""Frame pacing for the serving loop: language steps keep out of the way of action streams that arrive from outside.

In the FrameDriver (benchmarks) the frame clock is ours. In the inference node the action requests come from task
nodes at their own rates, so the engine thread cannot know when the next chunk is owed unless it learns it: the
pacer keeps each stream's recent arrivals, takes the median gap as its period and predicts the next arrival. Before
a language step the engine thread asks ``hold_s``: a step that would still be running when a chunk is due is held
until that chunk arrives, which is the paper's frame seen from the server: the action's prefill and denoising first,
then decoding fills the rest of the frame (adaptive k). A step is judged by the slowest recent language step, or,
when it computes more tokens than any of them (a new prompt's prefill), by their slowest cost per token. The first
language step after a chunk is never held: it has the whole frame, and if it does not fit in that it never will
(holding it would starve it). With ``steps_per_frame`` k > 0, language instead takes exactly k steps per frame and
then waits for the next chunk.

A stream that misses its slot by more than ``grace`` periods no longer holds anyone (a task that stopped sending
must not stall language work), and a stream not heard from for ``STALE_PERIODS`` periods is forgotten. Action work
itself is never held.
"""

import statistics
from collections import deque
from dataclasses import dataclass, field

HISTORY = 8  # arrivals kept per stream: the median gap tolerates a few late or early chunks
STALE_PERIODS = 3.0


@dataclass
class _Stream:
    arrivals: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY + 1))

    def period(self) -> float | None:
        if len(self.arrivals) < 2:
            return None
        times = list(self.arrivals)
        return statistics.median(b - a for a, b in zip(times, times[1:], strict=False))

    def next_due(self) -> tuple[float, float] | None:
        """(when the next chunk is due, the period), once the stream has a period."""
        period = self.period()
        return None if not period else (self.arrivals[-1] + period, period)


class FramePacer:
    """Decides whether the engine thread may start a language step now (see the module docstring)."""

    def __init__(self, steps_per_frame: int = 0, grace: float = 0.25) -> None:
        if steps_per_frame < 0 or grace < 0:
            raise ValueError("steps_per_frame and grace must be >= 0")
        self.steps_per_frame = steps_per_frame
        self.grace = grace
        self._streams: dict[str, _Stream] = {}
        self._language_steps = 0  # since the last action step
        self._steps: deque[tuple[int, float]] = deque(maxlen=HISTORY)  # recent language steps: (tokens, seconds)
        self.held_s = 0.0  # total time language work was held, for stats

    def action_arrived(self, stream: str, now: float) -> None:
        """An action request of ``stream`` (its task id) was submitted at ``now``."""
        self._streams.setdefault(stream, _Stream()).arrivals.append(now)

    def step_done(self, served_actions: bool, duration_s: float, tokens: int = 1) -> None:
        if served_actions:
            self._language_steps = 0
        else:
            self._language_steps += 1
            self._steps.append((max(tokens, 1), duration_s))

    def estimate_s(self, tokens: int) -> float:
        """A conservative guess of a language step computing ``tokens`` tokens, from the recent ones."""
        if not self._steps:
            return 0.0
        if tokens <= max(t for t, _ in self._steps):
            return max(d for _, d in self._steps)
        return tokens * max(d / t for t, d in self._steps)

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

    def _next_due(self, now: float) -> tuple[float, float] | None:
        """The earliest next chunk over the live streams, with that stream's period; forgets stale streams."""
        best = None
        for name, stream in list(self._streams.items()):
            due = stream.next_due()
            if due is not None and now - stream.arrivals[-1] > STALE_PERIODS * due[1]:
                del self._streams[name]
                continue
            if due is not None and (best is None or due[0] < best[0]):
                best = due
        return best
