"""What the built-in driver remembers of obstacles its sensors no longer see, as nav2's obstacle layer marks and
clears: each reading's points are kept in the odometry frame; a later reading of the same sensor clears the ones its
rays reached or passed (there, the obstacle is in that reading or gone), and the rest stay where odometry puts them.
So an obstacle that leaves a narrow camera's view as the robot nears it (beside its corridor, under its minimum
range) still stops the robot. A kept point is forgotten ``keep_s`` after it was seen (a robot stopped by a point no
sensor can see again, a person gone from beside it, would never drive on), when asked (``forget``: nav2's costmap
clearing), or once it is farther than ``reach_m`` from the robot (far from the corridor a replan checks: a sensor
sees it again on the way); the nearest MAX_POINTS are kept. Pure numpy: the node brings the poses and each reading's
rays.
"""

from collections.abc import Callable

import numpy as np

from oxygen_ros.control import obstacles

MAX_POINTS = 40000  # points kept per sensor, nearest first (two depth images' worth)
NS = 1_000_000_000

Pose = tuple[float, float, float]  # x, y, yaw in odom
# points [N, 3] of the base frame at the reading's pose -> whether the reading's ray reached each
Reaches = Callable[[np.ndarray], np.ndarray]


class ObstacleMemory:
    def __init__(self) -> None:
        self._points = np.zeros((0, 3))  # in odom
        self._seen_ns = np.zeros(0, dtype=np.int64)  # the stamp of the reading each point came from
        self._stamp_ns: int | None = None  # the newest reading's
        self._epoch = 0  # the odometry's, when the points were kept (``OdometryHistory.epoch``)

    def add(self, seen: np.ndarray, pose: Pose, stamp_ns: int, reaches: Reaches, keep_s: float, reach_m: float,
            epoch: int = 0) -> None:  # fmt: skip
        """A reading taken at ``stamp_ns`` with the robot at ``pose``: its obstacle points ``seen`` (base frame then)
        are kept; points kept before that its rays reached (``reaches``), seen more than ``keep_s`` before it, or
        beyond ``reach_m`` are dropped. A reading older than the newest (time went back: a bag or simulation
        restarted), or of another odometry ``epoch`` (it jumped: the points kept are placed nowhere now), drops
        everything kept before it."""
        if self._stamp_ns is not None and (stamp_ns < self._stamp_ns or epoch != self._epoch):
            self._points, self._seen_ns = self._points[:0], self._seen_ns[:0]
        self._stamp_ns, self._epoch = stamp_ns, epoch
        local = obstacles.since(self._points, (0.0, 0.0, 0.0), pose)  # odom -> the base frame at the reading
        keep = ~reaches(local) & (stamp_ns - self._seen_ns <= keep_s * NS)
        keep &= np.hypot(local[:, 0], local[:, 1]) <= reach_m
        kept, seen_ns = self._points[keep], self._seen_ns[keep]
        points = np.concatenate([kept, obstacles.since(seen, pose, (0.0, 0.0, 0.0))])
        stamps = np.concatenate([seen_ns, np.full(len(seen), stamp_ns, dtype=np.int64)])
        if len(points) > MAX_POINTS:
            nearest = np.argpartition(np.hypot(points[:, 0] - pose[0], points[:, 1] - pose[1]), MAX_POINTS)
            points, stamps = points[nearest[:MAX_POINTS]], stamps[nearest[:MAX_POINTS]]
        self._points, self._seen_ns = points, stamps

    @property
    def epoch(self) -> int:
        """The odometry's epoch its points were kept in."""
        return self._epoch

    def forget(self) -> int:
        """Drop every kept point the newest reading did not see itself, as nav2's costmap clearing services do (an
        operator's call for a robot held by an obstacle that left where no sensor could see); how many."""
        keep = self._seen_ns == self._stamp_ns if self._stamp_ns is not None else np.zeros(len(self._points), bool)
        self._points, self._seen_ns = self._points[keep], self._seen_ns[keep]
        return int(len(keep) - keep.sum())

    def around(self, pose: Pose) -> np.ndarray:
        """The kept points in the base frame of a robot at ``pose`` (odom)."""
        return obstacles.since(self._points, (0.0, 0.0, 0.0), pose)

    def __len__(self) -> int:
        return len(self._points)
