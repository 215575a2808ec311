"""Whether the arm moved at all as its plan did. The tracking check ends a goal once a joint is over its
``max_tracking_error`` from where the plan has it; a plan that never takes a joint that far (fine motion) would pass
it with an arm that never moved (a controller switched off that still listens on its topic, a driver in a dry mode).
So each joint's excursion is kept twice, the plan's from where it started and the arm's from where it was first
read, and a goal in which no joint that its plan moved clearly (over ``FLOOR`` of its tracking error) went even half
as far did not happen. One joint that followed is motion: a jaw stalled on what it holds, a joint that lags at the
goal's end or a servo that sits off its command never make a moving arm a still one (the tracking check is for
them). A jaw on a controller of its own is asked less (``still``): that it moved at all when the plan took it
somewhere (from where it was first read: a jaw may jump to its first target), since it may stall on what it holds
after any distance, or none."""

from dataclasses import dataclass

import numpy as np

from oxygen_ros.control.arm.turns import difference

FLOOR = 0.1  # of max_tracking_error: less planned motion than this is not told apart from a still arm
FOLLOWED = 0.5  # of the planned excursion: a joint that went this far moved


@dataclass
class Excursion:
    """Per joint, the farthest the plan went from its first point and the measured arm from its first reading (a
    turning joint the short way round)."""

    start: np.ndarray | None = None  # the first reading
    commanded_start: np.ndarray | None = None  # where the plan had the arm then
    planned: np.ndarray | None = None
    measured: np.ndarray | None = None
    reach: np.ndarray | None = None  # the farthest the plan went from the first reading

    def add(self, measured: np.ndarray, commanded: np.ndarray, turns: np.ndarray) -> None:
        """One reading of the arm and where the plan had it then."""
        if self.start is None:
            self.start, self.commanded_start = measured.copy(), commanded.copy()
            self.planned, self.measured, self.reach = (np.zeros(len(measured)) for _ in range(3))
        self.planned = np.maximum(self.planned, np.abs(difference(commanded, self.commanded_start, turns)))
        self.reach = np.maximum(self.reach, np.abs(difference(commanded, self.start, turns)))
        self.measured = np.maximum(self.measured, np.abs(difference(measured, self.start, turns)))

    def unfollowed(self, tracking_error: np.ndarray, ignored: list[int]) -> int | None:
        """None when some joint (``ignored`` aside: a jaw on a controller of its own says nothing of the arm's)
        its plan moved by over FLOOR of its tracking error went FOLLOWED of that, or when the plan moved none that
        far; else the joint the plan moved farthest."""
        if self.start is None:
            return None
        clear = self.planned > FLOOR * tracking_error
        clear[ignored] = False
        if not clear.any() or (self.measured[clear] >= FOLLOWED * self.planned[clear]).any():
            return None
        return int(np.argmax(np.where(clear, self.planned, -np.inf)))

    def still(self, joint: int, floor: float) -> bool:
        """Whether the plan took ``joint`` over ``floor`` from where it was first read and it never went farther
        than that."""
        if self.start is None:
            return False
        return bool(self.reach[joint] > floor >= self.measured[joint])
