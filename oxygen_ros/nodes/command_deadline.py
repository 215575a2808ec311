"""How long a motion command may stay on the base. The navigation node sizes its top speed so that the motion its
obstacle check has not seen stays within the clearance: from the odometry's pose to the end of the command's cover,
counted from the check, on the assumption that the next replan replaces the command by then. A replan that comes
later (the executor's threads busy, a long callback) would leave the base driving on an obstacle check that old, so
a thread of its own, outside the executor that runs the replans, sends the stop once a command outlives its cover;
the next replan drives again.

The cover is on the node's clock, as the replans are. Under use_sim_time that clock is moved by /clock, whose
subscription runs on the same executor: a busy executor freezes it, so a node's clock standing still for the cover
in steady time ends the command too (a paused simulator gets a needless zero command). A clock gone back (a
simulation reset) ends it at once. A /clock coarser than the cover (a simulator publishing it at 10 Hz under 20 Hz
replans) would end each command before the next replan: keep replan_rate_hz at or below the /clock rate."""

import contextlib
import threading
import time
from collections.abc import Callable

from oxygen_ros.nodes.stamps import StillClock

LATE_REPLAN_GRACE = 0.5  # replan periods a replan may come late (timer jitter, its own work) before the stop
MIN_GRACE_S = 0.05  # and at least this long: at a high replan rate ordinary jitter is not lateness
POLL_S = 0.01  # how often an armed deadline reads the clocks (the stop is this much later, and thread scheduling)


def cover_s(replan_hz: float) -> float:
    """How long after its obstacle check a command at ``replan_hz`` lasts unless a newer one comes."""
    return 1.0 / replan_hz + max(LATE_REPLAN_GRACE / replan_hz, MIN_GRACE_S)


def lasts_s(cover: float) -> float:
    """How long after its check a command with ``cover`` may run before the deadline stops it: the cover, less the
    polling by which the stop may come late (so it lands within the cover)."""
    return cover - POLL_S


class CommandDeadline:
    """Under ``lock``, ``arm`` for each motion command that goes out and ``disarm`` for a stop; ``stop`` is called
    under ``lock`` once the node's clock (``now_ns``) passes the armed time with no newer command, and ``warn`` says
    so outside it. ``close`` must not be called holding ``lock``."""

    def __init__(self, lock: threading.Lock, now_ns: Callable[[], int], stop: Callable[[], None],
                 warn: Callable[[str], None]) -> None:  # fmt: skip
        self._lock, self._now_ns, self._stop, self._warn = lock, now_ns, stop, warn
        self._armed = threading.Condition(lock)
        self._window: tuple[int, int] | None = None  # the armed command's (check, expiry) on the node's clock, ns
        self._clock = StillClock(0, 0.0)  # the node's clock when last seen to move, and the steady time then
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="command_deadline", daemon=True)
        self._thread.start()

    def arm(self, checked_ns: int, lasts_s: float) -> None:
        """The newest command, from an obstacle check at ``checked_ns`` (node clock), lasts ``lasts_s`` from it."""
        self._window = (checked_ns, checked_ns + round(lasts_s * 1e9))
        self._clock = StillClock(checked_ns, time.monotonic())
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
                why = failed = ""
                try:
                    why = self._expired()
                    if why:
                        self._stop()
                        self._window = None  # (a stop that failed stays due: it is tried again next poll)
                except Exception as exc:  # the thread outlives a clock read or a send that failed: it is needed
                    failed = f"{type(exc).__name__}: {exc}"
                if failed or not why:
                    self._armed.wait(POLL_S)
            if failed:
                self._say(f"the command deadline failed ({failed}): trying again")
            elif why:
                self._say(f"{why}: the base was stopped until the next replan (the node's executor busy?)")

    def _say(self, message: str) -> None:
        with contextlib.suppress(Exception):  # a log that cannot be written must not end the thread that stops the base
            self._warn(message)

    def _expired(self) -> str:
        """Why the armed command is over ('' = it is not)."""
        (checked_ns, expires_ns), now_ns, steady = self._window, self._now_ns(), time.monotonic()
        lasts_s = (expires_ns - checked_ns) / 1e9
        if now_ns < checked_ns:
            return "the node's clock went back"
        if now_ns >= expires_ns:
            return f"no replan within {lasts_s:.2f} s of the last command's obstacle check"
        if self._clock.still_for(now_ns, steady) >= lasts_s:
            return f"the node's clock stood still for {lasts_s:.2f} s (use_sim_time: /clock not taken)"
        return ""
