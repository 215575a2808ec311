"""The unicycle controller turns towards the goal before driving, slows near it, reaches it when its commands are
integrated like camera_sim does, and stops only for close obstacles in front."""

import math

from oxygen_ros.control import unicycle
from oxygen_ros.control.unicycle import Pose2D
from oxygen_ros.perception.detect import DetectedObstacle
from oxygen_ros.perception.scene import RobotPose


def test_turns_in_place_when_facing_away_and_drives_when_facing_the_goal():
    linear, angular = unicycle.command(Pose2D(0.0, 0.0, math.pi), (1.0, 0.0), 0.3, 1.0)
    assert linear == 0.0 and abs(angular) == 1.0
    linear, angular = unicycle.command(Pose2D(0.0, 0.0, 0.0), (1.0, 0.0), 0.3, 1.0)
    assert (linear, angular) == (0.3, 0.0)
    linear, _ = unicycle.command(Pose2D(0.0, 0.0, 0.0), (0.05, 0.0), 0.3, 1.0)
    assert math.isclose(linear, 0.05)


def test_reaches_the_goal_through_the_simulated_base():
    pose, goal = RobotPose(100.0, 40.0, math.pi / 2), (2.2, 1.2)
    for _ in range(200):  # 20 s at 10 Hz
        here = Pose2D(pose.x_cm / 100, pose.y_cm / 100, pose.yaw_rad)
        if math.hypot(goal[0] - here.x, goal[1] - here.y) < 0.05:
            break
        linear, angular = unicycle.command(here, goal, 0.3, 1.0)
        pose = pose.moved(linear * 100, angular, 0.1)
    assert math.hypot(goal[0] - pose.x_cm / 100, goal[1] - pose.y_cm / 100) < 0.05


def test_straight_path_and_blocking():
    path = unicycle.straight_path(Pose2D(0.0, 0.0, 0.0), (0.0, 1.0))
    assert path[0] == (0.0, 0.0) and path[-1] == (0.0, 1.0) and len(path) == 11
    ahead = DetectedObstacle(0, 0, 15, ahead_cm=40, left_cm=0, clearance_cm=10)
    behind = DetectedObstacle(0, 0, 15, ahead_cm=-40, left_cm=0, clearance_cm=5)
    far = DetectedObstacle(0, 0, 15, ahead_cm=90, left_cm=0, clearance_cm=60)
    unseen = DetectedObstacle(0, 0, 15, ahead_cm=None, left_cm=None, clearance_cm=None)
    assert unicycle.blocking([far, behind, ahead, unseen], 25.0) is ahead
    assert unicycle.blocking([far, behind, unseen], 25.0) is None
