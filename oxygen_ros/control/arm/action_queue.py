"""The arm's plan: joint targets by control step, merged chunk by chunk as LeRobot's async inference does.

Step ``k`` is due at ``origin + k * period`` on the node clock. A chunk computed from what the robot saw at step
``s`` holds the targets of steps ``s, s + 1, ...`` (its row ``i`` is step ``s + i``). When it arrives at step ``now``:

* rows of steps the arm has executed or is about to (before ``now + lead``) are dropped: they can no longer change;
* rows of steps the current plan still holds are blended, ``old_weight * old + (1 - old_weight) * new`` (LeRobot's
  ``weighted_average`` is 0.3 / 0.7; 0 keeps the newest only), which softens the switch between two chunks;
* the rest are appended, and the plan's steps the new chunk does not cover are discarded.

The plan runs dry at its last step: past it the arm holds (an underrun), counted once per time it happens.
"""

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Merge:
    dropped: int  # rows too late to execute
    blended: int  # rows averaged with the plan's
    appended: int  # rows past the plan's end


class ActionQueue:
    def __init__(self, period_s: float, old_weight: float, lead_steps: int = 1) -> None:
        assert period_s > 0 and 0 <= old_weight < 1 and lead_steps >= 1
        self.period, self.old_weight, self.lead = period_s, old_weight, lead_steps
        self.origin: float | None = None  # node-clock seconds of step 0: the first chunk's observation
        self.first = 0  # step of rows[0]
        self.rows: np.ndarray | None = None  # [n, J] joint targets
        self.underruns = 0
        self._dry = False  # the last check found the plan run out (counts an underrun once)

    def step(self, t: float) -> int:
        """The step being executed at node-clock time ``t`` (steps start at ``origin``)."""
        assert self.origin is not None
        return math.floor((t - self.origin) / self.period + 1e-9)

    def time(self, step: int) -> float:
        assert self.origin is not None
        return self.origin + step * self.period

    def remaining(self, now: float) -> int:
        """Planned steps after the one executing at ``now`` (0 = the arm holds once this step ends)."""
        if self.rows is None:
            return 0
        return max(0, self.first + len(self.rows) - 1 - self.step(now))

    def check_underrun(self, now: float) -> bool:
        """Whether the plan has run out at ``now`` (an underrun is counted the first time it is seen)."""
        dry = self.rows is not None and self.remaining(now) == 0 and now >= self.time(self.first + len(self.rows) - 1)
        if dry and not self._dry:
            self.underruns += 1
        self._dry = dry
        return dry

    def merge(self, rows: np.ndarray, observed_at: float, now: float) -> Merge:
        """Merge a chunk [H, J] computed from the robot at ``observed_at``, arriving at ``now``."""
        if self.origin is None:
            self.origin = observed_at
        start, keep_from = self.step(observed_at), self.step(now) + self.lead
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
            self.first, self.rows = max(start, keep_from), np.stack(merged)
            self._dry = False
        return Merge(dropped, blended, len(merged) - blended)

    def hold(self) -> None:
        """Forget the plan (the arm was told to hold): the next chunk starts a new one on the same step grid."""
        self.rows = None
