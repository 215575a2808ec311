"""How long a motion command may stay on the base: the navigation node's top speed assumes the next replan comes
within a period and a half of the command, and a replan that comes later (the executor's threads busy, a long
callback, a collector's pause) would leave the base driving on an obstacle check that old. A thread of its own,
outside the executor that runs the replans, sends the stop once a command outlives that cover; the next replan
drives again. The deadline is on the node's clock, as the replans are: a paused simulator pauses both (its frozen
clock has a watchdog of its own)."""

import threading
from collections.abc import Callable

LATE_REPLAN_GRACE = 0.5  # replan periods a replan may come late (timer jitter, its own work) before the stop
POLL_S = 0.01  # how often an armed deadline reads the node's clock: the stop comes at most this late


class CommandDeadline:
    """Arm with ``set`` under ``lock`` each time a command goes out (None for a stop); ``stop`` is called under
    ``lock`` once the node's clock (``now_ns``) passes the armed time with no newer command, then ``expired``
    outside it (to say so)."""

    def __init__(self, lock: threading.Lock, now_ns: Callable[[], int], stop: Callable[[], None],
                 expired: Callable[[], None]) -> None:  # fmt: skip
        self._lock, self._now_ns, self._stop, self._expired = lock, now_ns, stop, expired
        self._armed = threading.Condition(lock)
        self._expires_ns: int | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="command_deadline", daemon=True)
        self._thread.start()

    def set(self, expires_ns: int | None) -> None:
        """The newest command lasts until ``expires_ns`` (None: it stops the base and never expires). Under lock."""
        self._expires_ns = expires_ns
        self._armed.notify()

    def close(self) -> None:
        """Stop watching (the node is going): nothing is sent from here after this returns."""
        with self._lock:
            self._closed = True
            self._armed.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and self._expires_ns is None:
                    self._armed.wait()
                if self._closed:
                    return
                left_s = (self._expires_ns - self._now_ns()) / 1e9
                if left_s > 0:
                    self._armed.wait(min(POLL_S, left_s))
                    continue
                self._expires_ns = None
                self._stop()
            self._expired()
