"""Approximate-time pairing of several cameras' frames (no ROS here): the rule of ROS message_filters'
ApproximateTimeSynchronizer (Python), which has no wheel for this venv, so the observation node can join one frame
per camera into one observation. Stamps are integer nanoseconds, so equal stamps stay equal.

The rule, as message_filters applies it on every arrival:

* each topic keeps a queue of its newest ``queue_size`` messages keyed by stamp (a second message with the same
  stamp replaces the first; past the size the oldest stamp goes, even the message just added);
* the arrival is the anchor: from every other queue, the stamps within ``slop`` of the anchor's, closest first; a
  queue with none and nothing is emitted;
* the combinations of those candidates are tried in order (the first other topic's closest first, then the
  next ...), and the first whose newest and oldest stamps lie less than ``slop`` apart is the set: it is emitted and
  its messages leave their queues. Nothing is emitted except on an arrival.

Where this differs, on purpose: a set is never older than the one before it on any topic. After a set goes out,
each queue also drops what is older than that topic's message in the set, and a later arrival older than it is
dropped (counted in ``late``): message_filters' Python class would still pair such leftovers and emit a set older
than the last one (its C++ ApproximateTime policy also discards them), and an older observation published after a
newer one would become the newest one for every reader. An arrival older than its topic's last emitted stamp by
more than ``reset_after_s`` is a clock that went back (a bag replayed from its start, a restarted simulation): the
queues and watermarks are cleared and the arrival starts afresh, where otherwise that topic would be refused
until its clock caught up.
"""

import itertools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

NS = 1_000_000_000
MAX_QUEUE = 1000  # messages per topic
MAX_COMBINATIONS = 1_000_000  # queue_size ** (topics - 1): the combinations one arrival may try at most


@dataclass(frozen=True)
class Stamped(Generic[T]):
    """One message of a set and its stamp, nanoseconds."""

    stamp_ns: int
    message: T


class FrameSync(Generic[T]):
    """Pairs messages from ``topics`` inputs (numbered 0 .. topics-1) whose stamps lie within ``slop_s``; thread-safe.

    ``add`` returns the set its arrival completes, one message per topic in topic order, or None."""

    def __init__(self, topics: int, queue_size: int, slop_s: float, reset_after_s: float = 1.0) -> None:
        if topics < 1:
            raise ValueError(f"approximate-time pairing needs at least one topic, got {topics}")
        if not 1 <= queue_size <= MAX_QUEUE:
            raise ValueError(f"the queue size must be in [1, {MAX_QUEUE}] messages, got {queue_size}")
        if queue_size ** (topics - 1) > MAX_COMBINATIONS:
            raise ValueError(f"{topics} topics with queues of {queue_size} give up to {queue_size ** (topics - 1)} "
                             f"combinations to try per message, more than {MAX_COMBINATIONS}")  # fmt: skip
        for name, value in (("slop", slop_s), ("reset_after", reset_after_s)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        self.topics, self.queue_size = topics, queue_size
        self.slop_ns, self.reset_after_ns = round(slop_s * NS), round(reset_after_s * NS)
        self._queues: list[dict[int, T]] = [{} for _ in range(topics)]
        self._emitted: list[int | None] = [None] * topics  # each topic's stamp in the last set
        self._lock = threading.Lock()
        self.late = 0  # arrivals older than their topic's last emitted stamp, dropped
        self.overflowed = 0  # queued messages pushed out by newer ones
        self.resets = 0  # clocks that went back

    def add(self, topic: int, stamp_ns: int, message: T) -> list[Stamped[T]] | None:
        """Queue ``message`` (stamped ``stamp_ns``) on ``topic``; the set it completes, or None."""
        if not 0 <= topic < self.topics:
            raise IndexError(f"topic {topic} is not one of the {self.topics} inputs")
        with self._lock:
            last = self._emitted[topic]
            if last is not None and stamp_ns < last:
                if last - stamp_ns <= self.reset_after_ns:
                    self.late += 1
                    return None
                self._clear()
                self.resets += 1
            queue = self._queues[topic]
            queue[stamp_ns] = message
            while len(queue) > self.queue_size:
                del queue[min(queue)]
                self.overflowed += 1
            if stamp_ns not in queue:  # older than a full queue: gone already
                return None
            stamps = self._first_set(topic, stamp_ns)
            return None if stamps is None else self._emit(stamps)

    def _first_set(self, topic: int, stamp_ns: int) -> list[int] | None:
        """The stamps (one per topic) of the first combination around the anchor within the slop, or None."""
        candidates = []
        for other, queue in enumerate(self._queues):
            if other == topic:
                continue
            near = sorted((s for s in queue if abs(s - stamp_ns) <= self.slop_ns), key=lambda s: (abs(s - stamp_ns), s))
            if not near:
                return None
            candidates.append(near)
        for combination in itertools.product(*candidates):
            stamps = [*combination[:topic], stamp_ns, *combination[topic:]]
            if max(stamps) - min(stamps) < self.slop_ns:
                return stamps
        return None

    def _emit(self, stamps: list[int]) -> list[Stamped[T]]:
        out = [Stamped(stamp, queue.pop(stamp)) for stamp, queue in zip(stamps, self._queues)]
        for topic, (stamp, queue) in enumerate(zip(stamps, self._queues)):
            self._emitted[topic] = stamp
            for older in [s for s in queue if s < stamp]:
                del queue[older]
        return out

    def _clear(self) -> None:
        for queue in self._queues:
            queue.clear()
        self._emitted = [None] * self.topics

    def discard(self, keep: Callable[[T], bool]) -> int:
        """Drop the queued messages ``keep`` refuses (e.g. those that arrived too long ago); how many went."""
        with self._lock:
            gone = 0
            for queue in self._queues:
                for stamp in [s for s, message in queue.items() if not keep(message)]:
                    del queue[stamp]
                    gone += 1
            return gone

    def queued(self) -> list[int]:
        """How many messages each topic has waiting."""
        with self._lock:
            return [len(queue) for queue in self._queues]


class RateGate:
    """At most ``rate_hz`` passes a second, on a clock in nanoseconds. The next pass is due one period after the
    previous one was due (not after it happened), so a stream a little faster than the rate, arriving with jitter, is
    thinned to the rate rather than beating down to a fraction of it; passes are never less than half a period apart,
    and one more than half a period late restarts the schedule from itself."""

    def __init__(self, rate_hz: float) -> None:
        if not (math.isfinite(rate_hz) and rate_hz > 0):
            raise ValueError(f"the rate must be a positive number of Hz, got {rate_hz}")
        self.period_ns = round(NS / rate_hz)
        self._due: int | None = None

    def passes(self, now_ns: int) -> bool:
        """Whether a pass at ``now_ns`` is allowed (and if so, it is counted). A clock that went back more than a
        period (a restarted simulation) restarts the schedule."""
        due = self._due
        if due is not None and now_ns < due and due - now_ns <= self.period_ns:
            return False
        late = due is None or now_ns < due or now_ns >= due + self.period_ns // 2
        self._due = now_ns + self.period_ns if late else due + self.period_ns
        return True
