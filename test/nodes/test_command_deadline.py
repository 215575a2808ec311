"""`CommandDeadline` on a node clock the test moves: a command not followed by a newer one within its cover gets one
stop from the deadline's own thread, and so does one whose clock went back or stood still (use_sim_time with /clock
not taken); a newer command or a stop disarms it; a stop that cannot be sent is tried again until it goes; closing
ends the thread."""

import threading
import time

from oxygen_ros.nodes.command_deadline import CommandDeadline, cover_s
from ros_harness import wait_until

LASTS_S = 5.0  # in steady time, long against the test's steps: only the node's clock the test moves ends it


class Watched:
    """A deadline whose node clock is ``now_ns``; its stops and warnings recorded."""

    def __init__(self) -> None:
        self.lock, self.now_ns, self.reads, self.stops, self.said = threading.Lock(), 100, 0, [], []
        self.failing = False
        self.deadline = CommandDeadline(self.lock, self._clock, self._stop, self.said.append)

    def _clock(self) -> int:
        self.reads += 1
        return self.now_ns

    def _stop(self) -> None:
        assert self.lock.locked()  # the stop goes out under the command lock, as every command does
        if self.failing:
            raise RuntimeError("publisher gone")
        self.stops.append(self.now_ns)

    def arm(self) -> None:
        with self.lock:
            self.deadline.arm(self.now_ns, LASTS_S)

    def ticking(self, now_ns: int) -> None:
        """The node's clock at ``now_ns``, read by the deadline a few times since (or it stopped reading)."""
        self.now_ns, seen = now_ns, self.reads
        wait_until(lambda: self.reads >= seen + 3 or self.stops or self.said, 5.0, "the deadline reading the clock")


def test_a_command_that_outlives_its_cover_gets_one_stop():
    w = Watched()
    w.arm()
    w.ticking(100 + 4_999_999_999)
    assert w.stops == [] and w.said == []  # the clock has not reached it
    w.ticking(100 + 5_000_000_000)
    wait_until(lambda: w.said, 5.0, "the warning")
    assert w.stops == [5_000_000_100] and "no replan within 5.00 s of the last command's obstacle check" in w.said[0]
    reads = w.reads
    time.sleep(0.1)
    assert w.reads == reads and len(w.stops) == 1  # disarmed once it stopped the base: it waits, reading nothing
    w.deadline.close()


def test_a_clock_gone_back_or_standing_still_ends_the_command():
    w = Watched()
    w.arm()
    w.ticking(99)  # a simulation reset: the clock would take its time to come back to the expiry
    wait_until(lambda: w.said, 5.0, "the warning")
    assert w.stops == [99] and "went back" in w.said[0]
    with w.lock:
        w.deadline.arm(99, 0.05)  # /clock no longer taken: the node's clock stays at 99
    wait_until(lambda: len(w.said) == 2, 5.0, "the second warning")
    assert w.stops == [99, 99] and "stood still for 0.05 s" in w.said[1]
    w.deadline.close()


def test_a_newer_command_or_a_stop_disarms_it():
    w = Watched()
    w.arm()
    w.ticking(4_500_000_000)
    w.arm()  # the next replan came in time
    w.ticking(7_500_000_000)
    assert w.stops == []
    with w.lock:
        w.deadline.disarm()  # a stop of the node's own
    w.now_ns = 20_000_000_000
    time.sleep(0.1)
    assert w.stops == [] and w.said == []
    w.deadline.close()


def test_a_stop_that_cannot_be_sent_is_said_and_tried_again_until_it_goes():
    w = Watched()
    w.failing = True
    w.arm()
    w.ticking(6_000_000_000)
    wait_until(lambda: w.said, 5.0, "the warning")
    assert w.said[0] == "the command deadline failed (RuntimeError: publisher gone): trying again"
    w.failing = False
    wait_until(lambda: w.stops, 5.0, "the stop, on a later try")
    assert w.stops == [6_000_000_000]
    w.deadline.close()


def test_close_ends_the_thread_and_nothing_is_sent_after():
    w = Watched()
    w.arm()
    w.deadline.close()
    assert not w.deadline._thread.is_alive()
    w.now_ns = 6_000_000_000
    time.sleep(0.1)
    assert w.stops == []


def test_the_cover_is_a_period_and_a_half_and_at_least_50_ms_late():
    assert cover_s(5.0) == 0.2 + 0.1 and cover_s(100.0) == 0.01 + 0.05
