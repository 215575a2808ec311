"""A continuous joint's angles a whole turn apart are one pose: its differences go the short way round and a plan's
targets are moved next to the arm by whole turns; every other joint keeps its plain difference."""

import math

import numpy as np

from oxygen_ros.control.arm.joint_limits import JointLimit
from oxygen_ros.control.arm.turns import beside, difference, turning

LIMITS = [JointLimit(-1.0, 1.0, 2.0), JointLimit(-math.inf, math.inf, 3.0)]


def test_only_a_joint_without_position_limits_turns():
    assert turning(LIMITS).tolist() == [False, True]
    assert turning([JointLimit(-math.inf, 0.0, 1.0)]).tolist() == [False]


def test_a_wrap_is_a_small_difference_on_a_turning_joint_only():
    turns = turning(LIMITS)
    measured, planned = np.array([0.9, -math.pi + 0.05]), np.array([0.8, math.pi - 0.05])  # the driver wrapped
    np.testing.assert_allclose(difference(measured, planned, turns), [0.1, 0.1])
    across = difference(np.array([3.0, 3.0]), np.array([-3.0, -3.0]), turns)
    np.testing.assert_allclose(across, [6.0, 6.0 - 2 * math.pi])


def test_a_plan_is_moved_next_to_the_arm_by_whole_turns():
    turns = turning(LIMITS)
    targets = np.array([[0.5, 3.0], [0.6, 3.2], [0.7, 3.4]])  # unwrapped, past pi
    moved = beside(targets, np.array([0.45, -3.2]), turns)  # the arm reads -3.2: the same pose as 3.08
    np.testing.assert_allclose(moved[:, 0], targets[:, 0])
    np.testing.assert_allclose(moved[:, 1], targets[:, 1] - 2 * math.pi)
    np.testing.assert_allclose(np.diff(moved[:, 1]), [0.2, 0.2])  # the steps kept
