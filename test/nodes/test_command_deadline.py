"""`CommandDeadline` on a clock the test moves: a command not followed by a newer one within its cover gets one stop
from the deadline's own thread, and so does one whose clock went back; a newer command or a stop disarms it; closing
ends the thread."""

import threading
import time

from oxygen_ros.nodes.command_deadline import POLL_S, CommandDeadline


class Watched:
    def __init__(self) -> None:
        self.lock, self.now_ns, self.stops, self.said = threading.Lock(), 100, [], threading.Event()
        self.deadline = CommandDeadline(self.lock, lambda: self.now_ns, self._stop, self.said.set)

    def _stop(self) -> None:
        assert self.lock.locked()  # the stop goes out under the command lock, as every command does
        self.stops.append(self.now_ns)

    def arm(self, lasts_ns: int) -> None:
        with self.lock:
            self.deadline.arm(self.now_ns, lasts_ns)

    def quiet(self) -> None:
        """Long enough for an armed deadline to read the clock several times."""
        time.sleep(5 * POLL_S)


def test_a_command_that_outlives_its_cover_gets_one_stop():
    w = Watched()
    w.arm(1_000)
    w.quiet()
    assert w.stops == [] and not w.said.is_set()  # the clock has not reached it
    w.now_ns = 1_100
    assert w.said.wait(2.0) and w.stops == [1_100]
    w.now_ns = 5_000
    w.quiet()
    assert w.stops == [1_100]  # disarmed once it stopped the base
    w.deadline.close()


def test_a_clock_gone_back_ends_the_command():
    w = Watched()
    w.arm(1_000)
    w.now_ns = 99  # a simulation reset: the clock would take its time to come back to the expiry
    assert w.said.wait(2.0) and w.stops == [99]
    w.deadline.close()


def test_a_newer_command_or_a_stop_disarms_it():
    w = Watched()
    w.arm(1_000)
    w.now_ns = 900
    w.arm(1_000)  # the next replan came in time
    w.now_ns = 1_500
    w.quiet()
    assert w.stops == []
    with w.lock:
        w.deadline.disarm()  # a stop of the node's own
    w.now_ns = 10_000
    w.quiet()
    assert w.stops == [] and not w.said.is_set()
    w.deadline.close()


def test_close_ends_the_thread_and_nothing_is_sent_after():
    w = Watched()
    w.arm(1_000)
    w.deadline.close()
    assert not w.deadline._thread.is_alive()
    w.now_ns = 2_000
    w.quiet()
    assert w.stops == []
