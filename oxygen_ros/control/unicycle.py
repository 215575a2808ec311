"""The navigation node's controller: drive a unicycle base to a goal point, stop for obstacles.

Pure geometry in one plane frame, the odom frame navigation_node drives in (metres, radians counter-clockwise
from +x): the node feeds it odometry, the target in odom and the latest frame's detections at its replan rate and
publishes what it returns.
"""

import math
from dataclasses import dataclass

from oxygen_ros.perception.detect import DetectedObstacle

TURN_IN_PLACE_RAD = math.radians(45)  # heading errors beyond this are turned out before driving
HEADING_GAIN = 2.0  # rad/s per rad of heading error
DISTANCE_GAIN = 1.0  # m/s per metre to go
PATH_STEP_M = 0.1
MAX_PATH_POINTS = 1000  # a farther goal gets its points spaced wider, never more of them


@dataclass(frozen=True)
class Pose2D:
    x: float
    y: float
    yaw: float


def command(pose: Pose2D, goal: tuple[float, float], max_linear: float, max_angular: float) -> tuple[float, float]:
    """(linear m/s, angular rad/s) towards ``goal``: turn first when facing away, slow down near it."""
    dx, dy = goal[0] - pose.x, goal[1] - pose.y
    error = math.atan2(math.sin(math.atan2(dy, dx) - pose.yaw), math.cos(math.atan2(dy, dx) - pose.yaw))
    angular = max(-max_angular, min(max_angular, HEADING_GAIN * error))
    if abs(error) > TURN_IN_PLACE_RAD:
        return 0.0, angular
    return min(max_linear, DISTANCE_GAIN * math.hypot(dx, dy)) * math.cos(error), angular


def top_speed(max_linear: float, clearance_m: float, unseen_s: float, decel_mps2: float) -> float:
    """The fastest forward speed whose travel over ``unseen_s`` (the odometry's age at a replan, since the obstacle
    readings are placed at its pose, plus how long the command lasts) and then braking to rest at ``decel_mps2``
    stays within ``clearance_m``, and no faster than ``max_linear``: an obstacle the check found just past the
    clearance is not reached, even by a base that stops only when the command runs out. v T + v^2 / (2 a) = c, as
    2 c / (T + sqrt(T^2 + 2 c / a)) (no cancellation at T = 0)."""
    return min(max_linear, 2.0 * clearance_m / (unseen_s + math.sqrt(unseen_s**2 + 2.0 * clearance_m / decel_mps2)))


def within_bulge(linear: float, angular: float, period_s: float, bulge_m: float) -> float:
    """``linear`` slowed so that one ``period_s`` of the arc (``linear``, ``angular``) strays at most ``bulge_m``
    beside the straight line ahead, the corridor the obstacle check clears: an arc of radius v / w through the angle
    w T strays r (1 - cos(w T)) from its start's heading (2 r once it turns past a half circle)."""
    bulge = 1.0 - math.cos(min(abs(angular) * period_s, math.pi))
    if bulge <= 0.0:
        return linear
    return min(linear, bulge_m * abs(angular) / bulge)


def straight_path(pose: Pose2D, goal: tuple[float, float]) -> list[tuple[float, float]]:
    """Points from the robot to the goal every PATH_STEP_M (wider past MAX_PATH_POINTS), both ends included;
    ValueError for a goal at no finite distance."""
    distance = math.hypot(goal[0] - pose.x, goal[1] - pose.y)
    if not math.isfinite(distance):
        raise ValueError(f"a straight path needs a goal at a finite distance, got {distance}")
    n = min(MAX_PATH_POINTS - 1, max(1, math.ceil(distance / PATH_STEP_M)))
    return [(pose.x + (goal[0] - pose.x) * i / n, pose.y + (goal[1] - pose.y) * i / n) for i in range(n + 1)]


def blocking(obstacles: list[DetectedObstacle], clearance_cm: float) -> DetectedObstacle | None:
    """The nearest obstacle in front of the robot closer than ``clearance_cm`` (gap between the bodies), if any.
    Obstacles behind the robot do not stop it: it is driving away from them."""
    close = [o for o in obstacles if o.clearance_cm is not None and o.clearance_cm < clearance_cm and o.ahead_cm > 0]
    return min(close, key=lambda o: o.clearance_cm, default=None)
