"""The arm's plan: joint targets by control step, merged chunk by chunk as LeRobot's async inference does.

Step ``k``'s target is due at ``origin + k * period`` on the node clock. A chunk computed from what the robot saw
during step ``s`` (its state read between the targets of ``s`` and ``s + 1``) holds the targets of steps ``s + 1,
s + 2, ...``: its row 0 is the next target, as a policy's first action is the one taken right after its observation.
When it arrives, with the controller able to take a trajectory no earlier than ``earliest`` (now plus the time a goal
needs to reach it):

* rows due before ``earliest`` are dropped: they can no longer be executed as planned;
* rows of steps the current plan still holds are blended, ``old_weight * old + (1 - old_weight) * new`` (LeRobot's
  ``weighted_average`` is 0.3 / 0.7; 0 keeps the newest only), which softens the switch between two chunks;
* the rest are appended, and the plan's steps the new chunk does not cover are discarded.

The plan runs dry at its last target: past it the arm holds (an underrun), counted once per time it happens. The
last target may be reached later than its step (``told``: the stop a plan ends with, given time to fit the limits);
the plan then moves the arm there that much slower. Between the moment a plan is sent and its first target (at least
the time a trajectory needs to reach the controller) the plan moves the arm from where it started to that target.
"""

import math
from dataclasses import dataclass

import numpy as np

EPS = 1e-9


@dataclass(frozen=True)
class Merge:
    dropped: int  # rows due before the controller could take them
    blended: int  # rows averaged with the plan's
    appended: int  # rows past the plan's end


class ActionQueue:
    def __init__(self, period_s: float, old_weight: float) -> None:
        assert period_s > 0 and 0 <= old_weight < 1
        self.period, self.old_weight = period_s, old_weight
        self.origin: float | None = None  # node-clock seconds of step 0: the first chunk's observation
        self.first = 0  # step of rows[0]
        self.rows: np.ndarray | None = None  # [n, J] joint targets
        self._end: float | None = None  # when the last target is reached, if not at its step (``told``)
        self._start: tuple[float, np.ndarray] | None = None  # (when, where) the plan sent last starts (``told``)
        self.underruns = 0
        self._dry = False  # the last check found the plan run out (counts an underrun once)

    def step(self, t: float) -> int:
        """The step during which node-clock time ``t`` falls (its target was due at its start)."""
        assert self.origin is not None
        return math.floor((t - self.origin) / self.period + EPS)

    def time(self, step: int) -> float:
        assert self.origin is not None
        return self.origin + step * self.period

    @property
    def last(self) -> int:
        """The plan's last step (only with a plan)."""
        assert self.rows is not None
        return self.first + len(self.rows) - 1

    @property
    def end(self) -> float:
        """When the plan reaches its last target (node clock s; only with a plan)."""
        return self.time(self.last) if self._end is None else self._end

    def remaining(self, now: float) -> int:
        """Planned targets still ahead at ``now`` (0 = the arm holds once the current one is reached), by their steps:
        a closing stop given more time (``told``) counts as due at its step, so the next chunk is asked for early."""
        if self.rows is None:
            return 0
        return max(0, self.last - self.step(now))

    def told(self, rows: np.ndarray, end: float, start: tuple[float, np.ndarray]) -> None:
        """The plan is what the arm was told: ``rows`` [n, J] (the merged targets made safe), the last reached at
        ``end`` (node clock s), its step or later, starting at ``start`` (when it was sent, and where the arm was to
        be then: where the old plan had it, or where it was measured)."""
        self.rows, self._end, self._start = rows, end, start

    def _place(self, t: float) -> tuple[int, float, float] | None:
        """The segment the plan is in at ``t``: (its first row, how far along it in [0, 1], its length in seconds;
        row -1: from the plan's start to its first target), or None outside the plan."""
        if self.rows is None or self.origin is None:
            return None
        first_at, n = self.time(self.first), len(self.rows)
        reached = self.end if n == 1 else first_at  # a lone target is the last one: maybe reached later
        if t < reached and self._start is not None and self._start[0] <= t:
            return -1, (t - self._start[0]) / (reached - self._start[0]), reached - self._start[0]
        if t < first_at:
            return None
        if n == 1:
            return (0, 0.0, self.period) if t <= self.end else None
        x = max(0.0, (t - self.origin) / self.period - self.first)  # from the first target on (a rounding below 0)
        if x < n - 2:
            return int(x), x - int(x), self.period
        before = self.time(self.last - 1)  # the last segment: it ends when the last target is reached
        frac = (t - before) / (self.end - before)
        return (n - 2, frac, self.end - before) if frac <= 1 else None

    def commanded(self, t: float) -> np.ndarray | None:
        """Where the plan has the arm at ``t`` (linear between targets, as a position-only trajectory plays), or None
        outside it."""
        place = self._place(t)
        if place is None:
            return None
        i, frac, _ = place
        if len(self.rows) == 1 and i == 0:
            return self.rows[0]
        return (1 - frac) * self._row(i) + frac * self.rows[i + 1]

    def velocity(self, t: float) -> np.ndarray | None:
        """How fast the plan moves the arm at ``t`` (its slope between the targets around ``t``, as ``commanded``
        moves), or None outside it."""
        place = self._place(t)
        if place is None:
            return None
        i, _, length = place
        if len(self.rows) == 1 and i == 0:
            return np.zeros_like(self.rows[0])
        return (self.rows[i + 1] - self._row(i)) / length

    def _row(self, i: int) -> np.ndarray:
        """Row ``i`` of the plan, -1 being where it starts."""
        return self._start[1] if i == -1 and self._start is not None else self.rows[i]

    def check_underrun(self, now: float) -> bool:
        """Whether the plan has run out at ``now`` (an underrun is counted the first time it is seen)."""
        dry = self.rows is not None and now >= self.end
        if dry and not self._dry:
            self.underruns += 1
        self._dry = dry
        return dry

    def merge(self, rows: np.ndarray, observed_at: float, earliest: float) -> Merge:
        """Merge a chunk [H, J] computed from the robot at ``observed_at``; the controller can take a trajectory
        whose first target is due at ``earliest`` or later."""
        if self.origin is None:
            self.origin = observed_at
        start = self.step(observed_at) + 1
        keep_from = max(start, math.ceil((earliest - self.origin) / self.period - EPS))
        merged, dropped, blended = [], 0, 0
        for i, row in enumerate(rows):
            k = start + i
            if k < keep_from:
                dropped += 1
                continue
            j = k - self.first
            if self.rows is not None and 0 <= j < len(self.rows):
                row = self.old_weight * self.rows[j] + (1.0 - self.old_weight) * row
                blended += 1
            merged.append(row)
        if merged:  # else the chunk came too late for any of its steps: the plan stays
            self.first, self.rows, self._end, self._start = keep_from, np.stack(merged), None, None
            self._dry = False
        return Merge(dropped, blended, len(merged) - blended)

    def hold(self) -> None:
        """Forget the plan (the arm was told to hold): the next chunk starts a new one on the same step grid."""
        self.rows, self._end, self._start = None, None, None
