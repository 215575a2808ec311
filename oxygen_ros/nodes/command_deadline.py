"""How long a motion command may stay on the base: the navigation node's top speed assumes the next replan comes
within a period and a half of the command, and a replan that comes later (the executor's threads busy, a long
callback, a collector's pause) would leave the base driving on an obstacle check that old. A thread of its own,
outside the executor that runs the replans, sends the stop once a command outlives that cover; the next replan
drives again. The deadline is on the node's clock, as the replans are: a paused simulator pauses both (its frozen
clock has a watchdog of its own), and a clock gone back (a simulation reset) ends a command at once."""

import threading
from collections.abc import Callable

LATE_REPLAN_GRACE = 0.5  # replan periods a replan may come late (timer jitter, its own work) before the stop
POLL_S = 0.01  # how often an armed deadline reads the node's clock: the stop comes at most this late


class CommandDeadline:
    """Under ``lock``, ``arm`` for each motion command that goes out and ``disarm`` for a stop; ``stop`` is called
    under ``lock`` once the node's clock (``now_ns``) passes the armed time with no newer command, then ``expired``
    outside it (to say so)."""

    def __init__(self, lock: threading.Lock, now_ns: Callable[[], int], stop: Callable[[], None],
                 expired: Callable[[], None]) -> None:  # fmt: skip
        self._lock, self._now_ns, self._stop, self._expired = lock, now_ns, stop, expired
        self._armed = threading.Condition(lock)
        self._window: tuple[int, int] | None = None  # the armed command's (stamp, expiry) on the node's clock, ns
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="command_deadline", daemon=True)
        self._thread.start()

    def arm(self, sent_ns: int, lasts_ns: int) -> None:
        """The newest command, stamped ``sent_ns``, lasts ``lasts_ns``."""
        self._window = (sent_ns, sent_ns + lasts_ns)
        self._armed.notify()

    def disarm(self) -> None:
        """The newest command stops the base: it never expires."""
        self._window = None

    def close(self) -> None:
        """Stop watching (the node is going): nothing is sent from here after this returns."""
        with self._lock:
            self._closed = True
            self._armed.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and self._window is None:
                    self._armed.wait()
                if self._closed:
                    return
                (sent_ns, expires_ns), now_ns = self._window, self._now_ns()
                if sent_ns <= now_ns < expires_ns:
                    self._armed.wait(min(POLL_S, (expires_ns - now_ns) / 1e9))
                    continue
                self._window = None
                self._stop()
            self._expired()
