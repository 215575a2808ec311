"""Excursion: whether the arm moved at all as its plan did, for motion too small for the tracking check to see."""

import math

import numpy as np

from oxygen_ros.control.arm.excursion import Excursion

ERRORS = np.array([0.3, 0.3, 0.3])  # each joint's max_tracking_error
TURNS = np.array([False, False, False])
START = np.array([0.5, -0.2, 1.0])


def _ramp(planned: list[float], shares: list[float], offset: float = 0.0, steps: int = 10) -> Excursion:
    """A plan moving each joint by ``planned`` over ``steps`` readings, joint j going ``shares[j]`` of it, read
    ``offset`` off its command (a servo that sits off it)."""
    excursion = Excursion()
    for i in range(steps + 1):
        commanded = START + np.array(planned) * i / steps
        excursion.add(START + offset + np.array(shares) * (commanded - START), commanded, TURNS)
    return excursion


def test_an_arm_that_stood_while_its_plan_moved_is_named_by_the_joint_planned_farthest():
    assert _ramp([0.05, 0.1, 0.0], [0.0, 0.0, 0.0]).unfollowed(ERRORS, []) == 1  # 0.1: inside the 0.3 bound


def test_an_arm_that_followed_lagged_or_sat_off_its_command_moved():
    assert _ramp([0.1, 0.2, -0.1], [1.0, 1.0, 1.0]).unfollowed(ERRORS, []) is None
    assert _ramp([0.1, 0.2, -0.1], [0.6, 0.6, 0.6]).unfollowed(ERRORS, []) is None  # behind at the end
    assert _ramp([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], offset=0.05).unfollowed(ERRORS, []) is None  # held, 0.05 off
    assert _ramp([0.1, 0.2, 0.0], [0.0, 1.0, 0.0]).unfollowed(ERRORS, []) is None  # one joint followed: it moved


def test_motion_under_the_floor_and_a_gripper_on_its_own_controller_are_not_judged():
    assert _ramp([0.02, 0.0, 0.0], [0.0, 0.0, 0.0]).unfollowed(ERRORS, []) is None  # 0.02 < 0.1 x 0.3
    assert _ramp([0.0, 0.0, 0.2], [0.0, 0.0, 0.0]).unfollowed(ERRORS, [2]) is None  # only the jaw was to move
    assert _ramp([0.2, 0.0, 0.2], [0.0, 0.0, 1.0]).unfollowed(ERRORS, [2]) == 0  # the jaw says nothing of the arm
    assert Excursion().unfollowed(ERRORS, []) is None  # nothing read


def test_the_farthest_point_counts_not_the_last():
    """A plan out and back: the arm that went out with it moved, though both end where they started."""
    out_and_back = ([0.0, 0.0, 0.0], [0.15, 0.0, 0.0], [0.0, 0.0, 0.0])
    followed, still = Excursion(), Excursion()
    for commanded in out_and_back:
        followed.add(np.array(commanded), np.array(commanded), TURNS)
        still.add(np.zeros(3), np.array(commanded), TURNS)
    assert followed.unfollowed(ERRORS, []) is None and still.unfollowed(ERRORS, []) == 0


def test_a_turning_joint_wrapped_by_its_driver_moved_the_short_way():
    """A wrist read at -pi + 0.05 after starting at pi - 0.05 went 0.1, as its plan did, not a whole turn."""
    excursion, turns = Excursion(), np.array([False, True, False])
    excursion.add(np.array([0.0, math.pi - 0.05, 0.0]), np.array([0.0, math.pi - 0.05, 0.0]), turns)
    excursion.add(np.array([0.0, -math.pi + 0.05, 0.0]), np.array([0.0, math.pi + 0.05, 0.0]), turns)
    np.testing.assert_allclose(excursion.measured, [0.0, 0.1, 0.0], atol=1e-12)
    assert excursion.unfollowed(ERRORS, []) is None
