"""The unicycle controller turns towards the goal before driving, slows near it, reaches it when its commands are
integrated like camera_sim does, and stops only for close obstacles in front."""

import math

from oxygen_ros.control import unicycle
from oxygen_ros.control.unicycle import Pose2D
from oxygen_ros.perception.detect import DetectedObstacle
from oxygen_ros.perception.scene import RobotPose


def test_the_top_speed_keeps_the_travel_the_obstacle_check_has_not_seen_and_the_stop_within_the_clearance():
    """Odometry 20 ms old and a command lasting 0.3 s (5 Hz): the travel over 0.32 s and the stop from that speed at
    1 m/s^2 fill the 0.25 m clearance; odometry 0.5 s old (input_timeout_s): over 0.8 s; a base that stops at once
    (no braking distance) may go 0.25 m / 0.32 s; never over max_linear_mps."""
    for unseen_s in (0.02 + 0.3, 0.5 + 0.3):
        v = unicycle.top_speed(10.0, 0.25, unseen_s, 1.0)
        assert math.isclose(v * unseen_s + v**2 / 2.0, 0.25)
    assert math.isclose(unicycle.top_speed(10.0, 0.25, 0.32, 1.0), 0.456, abs_tol=1e-3)  # README's figures
    assert math.isclose(unicycle.top_speed(10.0, 0.25, 0.8, 1.0), 0.268, abs_tol=1e-3)
    assert math.isclose(unicycle.top_speed(10.0, 0.25, 0.32, math.inf), 0.25 / 0.32)
    assert math.isclose(unicycle.top_speed(10.0, 0.25, 0.0, 2.0), math.sqrt(2 * 2.0 * 0.25))  # braking alone
    assert unicycle.top_speed(0.3, 0.25, 0.32, 1.0) == 0.3


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


def test_turning_while_driving_stays_within_the_corridor_for_one_period():
    """At 1 Hz replans, 0.25 m/s while turning 1 rad/s would stray 11.5 cm beside the straight corridor the obstacle
    check cleared; slowed, the arc (integrated in 1 ms steps) stays within the margin, and never stops outright."""
    margin, period = 0.05, 1.0
    for angular in (1.0, -1.0, 0.3, 4.0):
        linear = unicycle.within_bulge(0.25, angular, period, margin)
        x = y = yaw = widest = 0.0
        for _ in range(1000):
            x, y, yaw = x + linear * math.cos(yaw) * 1e-3, y + linear * math.sin(yaw) * 1e-3, yaw + angular * 1e-3
            widest = max(widest, abs(y))
        assert 0.0 < linear <= 0.25 and widest <= margin + 1e-4, (angular, linear, widest)
    assert math.isclose(unicycle.within_bulge(0.25, 1.0, period, margin), margin / (1.0 - math.cos(1.0)))
    assert unicycle.within_bulge(0.25, 0.0, period, margin) == 0.25  # straight: as fast as asked
    assert unicycle.within_bulge(0.25, 0.01, 0.1, margin) == 0.25  # a gentle correction at 10 Hz: unchanged
