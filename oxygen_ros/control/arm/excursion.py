"""Whether the arm moved as its plan did. The tracking check ends a goal once a joint is over its
``max_tracking_error`` from where the plan has it; a plan that never takes a joint that far (fine motion) would pass
it with an arm that never moved (a controller switched off that still listens on its topic, a driver in a dry mode).
So each joint's excursion from where the goal started is kept twice, planned and measured, and a goal whose plan
moved a joint clearly (``FLOOR`` of its tracking error) while the arm went less than half as far did not happen."""

from dataclasses import dataclass

import numpy as np

from oxygen_ros.control.arm.turns import difference

FLOOR = 0.1  # of max_tracking_error: less planned motion than this is not told apart from a still arm
FOLLOWED = 0.5  # of the planned excursion: the measured one at least this (lag at the goal's end stays well inside)


@dataclass
class Excursion:
    """Per joint, the farthest the plan and the measured arm went from the first reading (a turning joint the short
    way round)."""

    start: np.ndarray | None = None
    planned: np.ndarray | None = None
    measured: np.ndarray | None = None

    def add(self, measured: np.ndarray, commanded: np.ndarray, turns: np.ndarray) -> None:
        """One reading of the arm and where the plan had it then."""
        if self.start is None:
            self.start, self.planned, self.measured = measured.copy(), np.zeros(len(measured)), np.zeros(len(measured))
        self.planned = np.maximum(self.planned, np.abs(difference(commanded, self.start, turns)))
        self.measured = np.maximum(self.measured, np.abs(difference(measured, self.start, turns)))

    def unfollowed(self, tracking_error: np.ndarray, ignored: int | None) -> int | None:
        """The joint (``ignored`` aside: a gripper may stall on what it holds) its plan moved by over FLOOR of its
        tracking error that went less than FOLLOWED of that, or None."""
        if self.start is None:
            return None
        missed = (self.planned > FLOOR * tracking_error) & (self.measured < FOLLOWED * self.planned)
        if ignored is not None:
            missed[ignored] = False
        return int(np.argmax(missed)) if missed.any() else None
