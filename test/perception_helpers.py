"""Shared by the perception tests: ground-truth geometry the describer is graded against."""

import math

from oxygen_ros.perception.describe import PATH_MARGIN_CM, PATH_RANGE_CM
from oxygen_ros.perception.render import ROBOT_RADIUS_CM
from oxygen_ros.perception.scene import Obstacle, RobotPose, Scene


def time_obstacle_at(obstacle: Obstacle, x_cm: float) -> float:
    """The first time >= 0 at which the obstacle's centre is at ``x_cm`` walking east."""
    assert obstacle.x_min <= x_cm <= obstacle.x_max
    period = 2 * (obstacle.x_max - obstacle.x_min) / obstacle.speed_cm_s
    return ((x_cm - obstacle.x_min) / obstacle.speed_cm_s - obstacle.phase_s) % period


def x_straight_ahead(robot: RobotPose, y_cm: float) -> float:
    """Where the robot's heading line crosses the row ``y_cm``."""
    return robot.x_cm + (y_cm - robot.y_cm) / math.tan(robot.yaw_rad)


def obstacle_truth(scene: Scene, t: float) -> tuple[float, float, bool]:
    """(ahead, left, blocks the path) of the obstacle at time ``t``, from the scene's ground truth."""
    ahead, left = scene.robot.relative(*scene.obstacle.position(t))
    corridor = ROBOT_RADIUS_CM + scene.obstacle.radius_cm + PATH_MARGIN_CM
    return ahead, left, 0 < ahead <= PATH_RANGE_CM and abs(left) < corridor
