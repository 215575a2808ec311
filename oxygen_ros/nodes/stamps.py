"""builtin_interfaces Time (and Duration) <-> numbers: one conversion for every node that reads or writes a stamp."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from builtin_interfaces.msg import Duration, Time

NS = 1_000_000_000


def nanoseconds(stamp: Any) -> int:
    """A Time's (or Duration's) nanoseconds; 0 for an unstamped header."""
    return stamp.sec * NS + stamp.nanosec


MAX_CLOCK_SKEW_S = 1.0  # a stamp further than this from this node's clock comes from another clock
CLOCK_BACK_NS = 50_000_000  # 50 ms: a reading may arrive between a check's clock read and its use of the reading


def reading_age(now_ns: int, stamp_ns: int, arrival_ns: int) -> float:
    """Seconds since a reading stamped ``stamp_ns`` arrived at ``arrival_ns`` (this node's clock): the older of the
    two, so neither a sender's clock running ahead nor a late delivery makes it look fresh; infinite when it arrived
    over ``CLOCK_BACK_NS`` after ``now_ns`` (this node's clock went back: a sim reset, a stepped system clock), which
    dates nothing. Less is a reading taken in after ``now_ns`` was read: as fresh as its stamp says."""
    if arrival_ns > now_ns + CLOCK_BACK_NS:
        return math.inf
    return max(0.0, (now_ns - min(stamp_ns, arrival_ns)) / NS)


def capture_ns(stamp_ns: int, arrival_ns: int, warn: Callable[[str], None]) -> int:
    """When a frame stamped ``stamp_ns`` was captured, as the node it reached at ``arrival_ns`` can vouch: never after
    it arrived (a camera on a clock running ahead would look fresh for as long as its clock leads, a frozen one
    included); ahead by over MAX_CLOCK_SKEW_S, ``warn`` is told (another machine's clock, or sim time against wall
    time: misconfigured). Unstamped (0) stays unstamped, and a clock not yet started (0, use_sim_time before /clock)
    dates nothing."""
    if not (stamp_ns and arrival_ns):
        return stamp_ns
    if stamp_ns - arrival_ns > MAX_CLOCK_SKEW_S * NS:
        warn(f"a camera frame stamped {(stamp_ns - arrival_ns) / NS:.1f} s after it arrived here, dated by its "
             "arrival: the camera and this node run on different clocks (use_sim_time? chrony?)")
    return min(stamp_ns, arrival_ns)


def seconds(stamp: Any) -> float:
    """A Time or Duration in seconds."""
    return stamp.sec + stamp.nanosec / NS


def time_ns(ns: int) -> Time:
    return Time(sec=ns // NS, nanosec=ns % NS)


def time_of(seconds_: float) -> Time:
    """A Time for ``seconds_`` (rounded to the nanosecond)."""
    return time_ns(round(seconds_ * NS))


def duration_of(seconds_: float) -> Duration:
    """A Duration of ``seconds_`` (rounded to the nanosecond)."""
    ns = round(seconds_ * NS)
    return Duration(sec=ns // NS, nanosec=ns % NS)


@dataclass
class StillClock:
    """How long, in steady time, the node's clock has shown one reading: under use_sim_time it stands still when
    /clock stops (a simulator gone or paused) or is not taken in (its executor busy), and timers on it with it."""

    reading_ns: int  # the clock's reading when last seen to move
    since: float  # the steady time (time.monotonic) then

    def still_for(self, now_ns: int, steady: float) -> float:
        """Seconds the clock has read ``now_ns`` up to ``steady`` (0 once it moved)."""
        if now_ns != self.reading_ns:
            self.reading_ns, self.since = now_ns, steady
        return steady - self.since
