"""The arm's plan: joint targets by control step, merged chunk by chunk as LeRobot's async inference does.

Step ``k``'s target is due at ``origin + k * period`` on the node clock. A chunk computed from what the robot saw
during step ``s`` (its state read between the targets of ``s`` and ``s + 1``) holds the targets of steps ``s + 1,
s + 2, ...``: its row 0 is the next target, as a policy's first action is the one taken right after its observation.
When it arrives, with the controller able to take a trajectory no earlier than ``earliest`` (now plus the time a goal
needs to reach it):

* rows the arm has passed are dropped: while a plan moves it, those due before ``earliest`` (they can no longer be
  executed as planned); where it stood still (no plan yet, a hold, or its plan's last step before ``earliest``), only
  those of the steps it played before it stopped, and the rest are put off (``waited`` steps) to start at the first
  step the controller can take: an arm that waited where it was read has played none of them. As LeRobot's robot
  client skips the actions up to the last one it executed (``_aggregate_action_queues``: an empty queue advances no
  step) and a synchronous policy plays its first action whenever its inference ends; dropping them instead would
  start a still arm partway into its chunk, a jump of as many steps of motion as the inference took periods;
* rows of steps the current plan still holds are blended, ``old_weight * old + (1 - old_weight) * new`` (LeRobot's
  ``weighted_average`` is 0.3 / 0.7; 0 keeps the newest only), which softens the switch between two chunks;
* the rest are appended, and the plan's steps the new chunk does not cover are discarded.

The plan runs dry at its last target: past it the arm holds (an underrun), counted once per time it happens. Once
sent (``told``), the plan is what the controller was told, played as a joint_trajectory_controller plays it
(``trajectory_playback``): cubic segments through the targets at their velocities, from where the arm was to be when
it was sent, moving as it was, to the first target (at least the time a trajectory needs to reach the controller
later), the last one maybe later than its step (the stop a plan ends with, given time to fit the limits). So where
the plan has the arm and how fast, which the tracking check and a hold read, are where the controller takes it, as
if taken when sent: trajectories go unstamped, so the controller starts one when it takes it, a delivery's time
later (well under ``send_lead_s``, or the trajectory is refused as stale).
"""

import math
from dataclasses import dataclass

import numpy as np

from oxygen_ros.control.trajectory_playback import Trajectory

EPS = 1e-9


@dataclass(frozen=True)
class Merge:
    dropped: int  # rows of steps the arm had passed when the controller could take them
    blended: int  # rows averaged with the plan's
    appended: int  # rows past the plan's end
    waited: int = 0  # steps the kept rows were put off: the arm stood still meanwhile


class ActionQueue:
    def __init__(self, period_s: float, old_weight: float) -> None:
        assert period_s > 0 and 0 <= old_weight < 1
        self.period, self.old_weight = period_s, old_weight
        self.origin: float | None = None  # node-clock seconds of step 0: the first chunk's observation
        self.first = 0  # step of rows[0]
        self.rows: np.ndarray | None = None  # [n, J] joint targets
        self._played: Trajectory | None = None  # the rows as the controller was told them (``told``; merged: None)
        self._stopped_at = -math.inf  # without a plan: the last step the arm played (a hold's; none before a plan)
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
        return self.time(self.last) if self._played is None else self._played.end_s

    def remaining(self, now: float) -> int:
        """Planned targets still ahead at ``now`` (0 = the arm holds once the current one is reached), by their steps:
        a closing stop given more time (``told``) counts as due at its step, so the next chunk is asked for early."""
        if self.rows is None:
            return 0
        return max(0, self.last - self.step(now))

    def told(self, positions: np.ndarray, velocities: np.ndarray, times: np.ndarray, sent_at: float,
             start: np.ndarray, start_velocity: np.ndarray | None) -> None:  # fmt: skip
        """The plan is what the controller was told: ``positions`` [n, J] (the merged targets made safe) at
        ``velocities`` [n, J], reached ``times`` [n] s after ``sent_at`` (node clock; each at its step, the last maybe
        later), from ``start`` moving at ``start_velocity`` (None: at rest) then: where the old plan had the arm, or
        where it was measured."""
        moving = np.zeros_like(start) if start_velocity is None else start_velocity
        self.rows = positions
        self._played = Trajectory(sent_at, start, sent_at, np.asarray(times, dtype=np.float64), positions, velocities,
                                  moving)  # fmt: skip

    def _playing(self, t: float) -> Trajectory | None:
        """The plan told, when ``t`` is within it (from when it was sent to its last target)."""
        played = self._played
        return played if played is not None and played.before_s <= t <= played.end_s else None

    def commanded(self, t: float) -> np.ndarray | None:
        """Where the plan has the arm at ``t``, or None outside it (before it was sent, past its end, merged and not
        yet told)."""
        played = self._playing(t)
        return None if played is None else played.sample(t)

    def resting(self, t: float) -> np.ndarray | None:
        """Where the plan left the arm once ``t`` is past its end (its last target, which the controller holds), or
        None before that or without a plan told."""
        played = self._played
        return played.positions[-1] if played is not None and t > played.end_s else None

    def velocity(self, t: float) -> np.ndarray | None:
        """How fast the plan moves the arm at ``t`` (the spline's slope where ``commanded`` has it), or None outside
        it."""
        played = self._playing(t)
        return None if played is None else played.velocity(t)

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
        start = self.step(observed_at) + 1  # row 0's own step
        takeable = math.ceil((earliest - self.origin) / self.period - EPS)
        # the last step the arm played before the controller can take this: all before takeable while a plan moves
        # it; its last step when the plan ran out sooner, or a hold's (-inf before any plan): it stood still since
        played = min(takeable - 1, self.last if self.rows is not None else self._stopped_at)
        skip = max(0, played + 1 - start)  # rows of steps the arm passed
        first = max(takeable, start + skip)  # where the first kept row goes: its own step, or put off to takeable
        merged, blended = [], 0
        for i, row in enumerate(rows[skip:]):
            j = first + i - self.first
            if self.rows is not None and 0 <= j < len(self.rows):
                row = self.old_weight * self.rows[j] + (1.0 - self.old_weight) * row
                blended += 1
            merged.append(row)
        if merged:  # else the chunk came too late for any of its steps: the plan stays
            self.first, self.rows, self._played = first, np.stack(merged), None
            self._dry = False
        return Merge(len(rows) - len(merged), blended, len(merged) - blended, first - start - skip if merged else 0)

    def hold(self, at: float) -> None:
        """Forget the plan (the arm was told to hold at node-clock ``at``, braking from where the plan had it then):
        the next chunk starts a new one on the same step grid, after the steps played until then (a plan the
        controller had not taken yet counts as played up to ``at``: a chunk is asked for only after the hold, so
        its steps all come later)."""
        if self.rows is not None and self.origin is not None:
            self._stopped_at = min(self.step(at), self.last)
        self.rows, self._played = None, None
