"""Excursion: whether the arm went where its plan did, for motion too small for the tracking check to see."""

import math

import numpy as np

from oxygen_ros.control.arm.excursion import Excursion

ERRORS = np.array([0.3, 0.3, 0.3])  # each joint's max_tracking_error
TURNS = np.array([False, False, False])


def _ramp(excursion: Excursion, planned: list[float], measured_share: float, steps: int = 10) -> Excursion:
    """A plan moving each joint by ``planned`` over ``steps`` readings, the arm going ``measured_share`` of it."""
    start = np.array([0.5, -0.2, 1.0])
    for i in range(steps + 1):
        commanded = start + np.array(planned) * i / steps
        excursion.add(start + measured_share * (commanded - start), commanded, TURNS)
    return excursion


def test_an_arm_that_stood_while_its_plan_moved_a_joint_is_named():
    assert _ramp(Excursion(), [0.0, 0.1, 0.0], 0.0).unfollowed(ERRORS, None) == 1  # 0.1: inside the 0.3 bound


def test_an_arm_that_followed_or_lagged_a_little_is_not():
    assert _ramp(Excursion(), [0.1, 0.2, -0.1], 1.0).unfollowed(ERRORS, None) is None
    assert _ramp(Excursion(), [0.1, 0.2, -0.1], 0.6).unfollowed(ERRORS, None) is None  # behind at the end


def test_motion_under_the_floor_and_the_gripper_are_not_judged():
    assert _ramp(Excursion(), [0.02, 0.0, 0.0], 0.0).unfollowed(ERRORS, None) is None  # 0.02 < 0.1 x 0.3
    assert _ramp(Excursion(), [0.0, 0.0, 0.2], 0.0).unfollowed(ERRORS, 2) is None  # a jaw stalled on what it holds
    assert Excursion().unfollowed(ERRORS, None) is None  # nothing read


def test_the_farthest_point_counts_not_the_last():
    """A plan out and back: the arm that went out with it moved, though both end where they started."""
    excursion, start = Excursion(), np.zeros(3)
    for commanded in ([0.0, 0.0, 0.0], [0.15, 0.0, 0.0], [0.0, 0.0, 0.0]):
        excursion.add(start + np.array(commanded), np.array(commanded), TURNS)
    assert excursion.unfollowed(ERRORS, None) is None
    still = Excursion()
    for commanded in ([0.0, 0.0, 0.0], [0.15, 0.0, 0.0], [0.0, 0.0, 0.0]):
        still.add(start, np.array(commanded), TURNS)
    assert still.unfollowed(ERRORS, None) == 0


def test_a_turning_joint_wrapped_by_its_driver_moved_the_short_way():
    """A wrist read at -pi + 0.05 after starting at pi - 0.05 went 0.1, as its plan did, not a whole turn."""
    excursion, turns = Excursion(), np.array([False, True, False])
    excursion.add(np.array([0.0, math.pi - 0.05, 0.0]), np.array([0.0, math.pi - 0.05, 0.0]), turns)
    excursion.add(np.array([0.0, -math.pi + 0.05, 0.0]), np.array([0.0, math.pi + 0.05, 0.0]), turns)
    np.testing.assert_allclose(excursion.measured, [0.0, 0.1, 0.0], atol=1e-12)
    assert excursion.unfollowed(ERRORS, None) is None
