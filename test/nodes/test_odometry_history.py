"""The navigation node's odometry history: a reading is placed by the robot's pose when it was taken (interpolated
between the poses either side of its stamp) and so moved by the motion since (against the newest pose), and one older
than the history cannot be placed."""

import math

import numpy as np
import pytest

from oxygen_ros.control import obstacles
from oxygen_ros.control.unicycle import Pose2D
from oxygen_ros.nodes.odometry_history import Odom, OdometryHistory
from oxygen_ros.nodes.tf.tree import TransformUnavailable

S = 1_000_000_000


def shift(history: OdometryHistory, points: np.ndarray, stamp_ns: int) -> np.ndarray:
    """``points`` of the base frame at ``stamp_ns`` in the base frame now, as the obstacle sources place them."""
    then, now = history.pose_at(stamp_ns), history.latest().pose
    return obstacles.since(points, (then.x, then.y, then.yaw), (now.x, now.y, now.yaw))


def test_a_reading_is_moved_by_the_motion_since_its_stamp():
    history = OdometryHistory()
    for i in range(5):  # driving forward 0.1 m per 0.1 s, facing +x
        history.add(Odom(Pose2D(0.1 * i, 0.0, 0.0), i * S // 10, i * S // 10))
    ahead = np.array([[1.0, 0.0, 0.0]])
    np.testing.assert_allclose(shift(history, ahead, 2 * S // 10), [[0.8, 0.0, 0.0]], atol=1e-12)  # 0.2 m since
    np.testing.assert_allclose(shift(history, ahead, 4 * S // 10), ahead, atol=1e-12)  # taken at the newest pose
    # between two poses: where the robot was then, not at the next pose (0.25 m since, not 0.2)
    np.testing.assert_allclose(shift(history, ahead, 15 * S // 100), [[0.75, 0.0, 0.0]], atol=1e-12)
    np.testing.assert_allclose(shift(history, ahead, S), ahead, atol=1e-12)  # newer than the odometry: as now
    with pytest.raises(TransformUnavailable, match="does not reach back"):
        shift(history, ahead, -S)


def test_a_turn_since_the_reading_rotates_it():
    history = OdometryHistory()
    history.add(Odom(Pose2D(0.0, 0.0, 0.0), 0, 0))
    history.add(Odom(Pose2D(0.0, 0.0, math.pi / 2), S, S))
    np.testing.assert_allclose(shift(history, np.array([[1.0, 0.0, 0.0]]), 0), [[0.0, -1.0, 0.0]], atol=1e-12)
    assert obstacles.blocking(shift(history, np.array([[0.3, 0.0, 0.0]]), 0), 0.2, 0.25) is None  # now to the side


def test_a_turn_across_the_wrap_is_interpolated_the_short_way():
    history = OdometryHistory()
    history.add(Odom(Pose2D(0.0, 0.0, math.pi - 0.1), 0, 0))
    history.add(Odom(Pose2D(0.0, 0.0, -math.pi + 0.1), S, S))  # 0.2 rad to the left, across +-pi
    assert abs(math.remainder(history.pose_at(S // 2).yaw - math.pi, 2 * math.pi)) < 1e-12


def test_without_odometry_nothing_can_be_placed_and_time_going_back_forgets_the_history():
    history = OdometryHistory()
    with pytest.raises(TransformUnavailable, match="no odometry"):
        shift(history, np.zeros((1, 3)), 0)
    history.add(Odom(Pose2D(0.0, 0.0, 0.0), S // 2, S // 2))
    history.add(Odom(Pose2D(0.0, 0.0, 0.0), 5 * S, 5 * S))
    history.add(Odom(Pose2D(1.0, 0.0, 0.0), S, S))  # a bag restarted: older stamps, the poses before are gone
    with pytest.raises(TransformUnavailable):
        shift(history, np.zeros((1, 3)), S // 2)


def test_one_stamp_twice_keeps_the_history_and_the_newer_pose():
    """Two odometry messages with one stamp (sim time: both in one /clock step) are no clock going back: the poses
    before stay, a reading from before them is still placed, and against the newer of the two (the newest)."""
    history = OdometryHistory()
    history.add(Odom(Pose2D(0.0, 0.0, 0.0), 0, 0))
    history.add(Odom(Pose2D(0.1, 0.0, 0.0), S // 10, S // 10))
    history.add(Odom(Pose2D(0.12, 0.0, 0.0), S // 10, S // 10))
    np.testing.assert_allclose(shift(history, np.array([[1.0, 0.0, 0.0]]), 0), [[0.88, 0.0, 0.0]], atol=1e-12)


def test_a_pose_that_jumps_further_than_a_base_can_go_restarts_the_history():
    """A base controller restarted at its origin (stamps still increasing): the poses before are another frame's, so
    a reading from before it is placed nowhere, and the epoch tells what was placed by them (the obstacle memory)."""
    history = OdometryHistory()
    history.add(Odom(Pose2D(5.0, 0.0, 0.0), 0, 0))
    history.add(Odom(Pose2D(5.5, 0.0, 0.0), S // 10, S // 10))  # 0.5 m in 0.1 s: within 1 m + 10 m/s x 0.1 s
    assert history.epoch == 0
    history.add(Odom(Pose2D(0.0, 0.0, 0.0), 2 * S // 10, 2 * S // 10))
    assert history.epoch == 1
    with pytest.raises(TransformUnavailable, match="does not reach back"):
        history.pose_at(S // 10)
