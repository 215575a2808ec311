"""The navigation node's recent odometry: the newest pose to drive by, and the poses of the last seconds, so that an
obstacle reading taken a moment ago is placed by where the robot was when it was taken, and so where it is now
relative to the robot (nav2's collision monitor calls this ``base_shift_correction``)."""

import math
import threading
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

from oxygen_ros.control.unicycle import Pose2D
from oxygen_ros.nodes.stamps import NS
from oxygen_ros.nodes.tf.tree import TransformUnavailable

HISTORY = 256  # poses kept: seconds of odometry at any usual rate (10-100 Hz), longer than any input_timeout_s
JUMP_M = 1.0  # a pose this much farther from the last than MAX_SPEED_MPS allows is a restart (a base controller's)
MAX_SPEED_MPS = 10.0  # the most max_linear_mps allows


@dataclass(frozen=True)
class Odom:
    """The newest usable odometry: the robot's pose in odom, its stamp and when it arrived (node clock, ns)."""

    pose: Pose2D
    stamp_ns: int
    received_ns: int


class OdometryHistory:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._poses: deque[tuple[int, Pose2D]] = deque(maxlen=HISTORY)  # (stamp ns, pose), stamps increasing
        self._latest: Odom | None = None
        # the history restarted this many times (time went back: a bag or sim time reset; the pose jumped: a base
        # controller restarted at its origin): what was placed by poses before means nothing now
        self.epoch = 0

    def add(self, odom: Odom) -> None:
        with self._lock:
            if self._poses:
                stamp, pose = self._poses[-1]
                allowed = JUMP_M + MAX_SPEED_MPS * max(odom.stamp_ns - stamp, 0) / NS
                if odom.stamp_ns < stamp or math.dist((odom.pose.x, odom.pose.y), (pose.x, pose.y)) > allowed:
                    self._poses.clear()
                    self.epoch += 1
            if self._poses and odom.stamp_ns == self._poses[-1][0]:  # one stamp twice (one /clock step): the newer
                self._poses.pop()
            self._poses.append((odom.stamp_ns, odom.pose))
            self._latest = odom

    def latest(self) -> Odom | None:
        with self._lock:
            return self._latest

    def pose_at(self, stamp_ns: int) -> Pose2D:
        """The robot's pose when a reading stamped ``stamp_ns`` was taken: interpolated between the poses either side
        of the stamp (the first one after it would place a reading taken while driving forward that much farther
        off: up to a speed times an odometry period), the newest for a reading newer than the odometry;
        TransformUnavailable when no odometry reaches back to it."""
        with self._lock:
            poses, latest = list(self._poses), self._latest
        if latest is None:
            raise TransformUnavailable("no odometry yet: a reading cannot be placed relative to the robot")
        stamps = [stamp for stamp, _ in poses]
        index = bisect_left(stamps, stamp_ns)
        if index == 0 and stamp_ns < stamps[0]:
            raise TransformUnavailable(f"the odometry kept ({len(poses)} poses) does not reach back to a reading "
                                       f"{(latest.stamp_ns - stamp_ns) / 1e9:.2f} s old")  # fmt: skip
        if index == len(poses):
            return poses[-1][1]
        after_ns, after = poses[index]
        if index == 0 or after_ns == stamp_ns:
            return after
        before_ns, before = poses[index - 1]
        share = (stamp_ns - before_ns) / (after_ns - before_ns)
        turn = math.remainder(after.yaw - before.yaw, 2 * math.pi)  # the short way round
        return Pose2D(before.x + share * (after.x - before.x), before.y + share * (after.y - before.y),
                      math.remainder(before.yaw + share * turn, 2 * math.pi))  # fmt: skip
