"""Targets are clamped within a small margin, refused beyond it, refused when they start far from where the arm is
or when a segment's cubic (the controller's spline) would move a joint faster than its limit; velocities are
monotone, zero on a limit and at the end."""

import math

import numpy as np
import pytest

from oxygen_ros.control.arm.joint_limits import JointLimit
from oxygen_ros.control.arm.safety import MAX_STOP_S, check_moving_start, check_targets
from oxygen_ros.errors import EngineError, ErrorCode

NAMES = ("pan", "roll")
LIMITS = [JointLimit(-1.0, 1.0, 2.0), JointLimit(-math.inf, math.inf, 4.0)]
TIMES = np.array([0.1, 0.2, 0.3])


def _check(targets, measured=(0.0, 0.0), margin=0.02, jump=0.3):
    return check_targets(np.asarray(targets, float), TIMES, np.asarray(measured, float), NAMES, LIMITS, margin, jump)


def test_within_the_margin_is_clamped_onto_the_limit():
    safe = _check([[0.1, 0.0], [0.2, 0.1], [0.3, 0.15]], measured=(0.0, 0.0), margin=0.02)
    assert safe.clamped == 0
    safe = check_targets(np.array([[0.9, 0.0], [1.01, 0.0], [1.015, 0.0]]), TIMES, np.array([0.85, 0.0]), NAMES,
                         LIMITS, 0.02, 0.3)  # fmt: skip
    np.testing.assert_allclose(safe.positions[:, 0], [0.9, 1.0, 1.0])
    assert safe.clamped == 2 and (safe.positions[:, 0] <= 1.0).all()
    # 0.9 between slopes 0.5 and 1.0 /s: their harmonic mean; on the limit and at the end: 0 (no overshoot)
    np.testing.assert_allclose(safe.velocities[:, 0], [2 / (1 / 0.5 + 1 / 1.0), 0.0, 0.0])


def test_a_steady_ramp_is_checked_at_its_cubic_peak():
    """From rest, a ramp at 1.6 rad/s (under the 2.0 limit on average) peaks at 4/3 of it in its first segment
    (zero start velocity): refused; at 1.4 rad/s (peak 1.87) it passes, its inner velocities the ramp's own."""
    ramp = lambda speed: np.column_stack([speed * TIMES, np.zeros(3)])  # noqa: E731
    with pytest.raises(EngineError, match="joint pan: step 0 would move at up to 2.133"):
        _check(ramp(1.6), jump=1.0)
    safe = _check(ramp(1.4), jump=1.0)
    np.testing.assert_allclose(safe.velocities[:, 0], [1.4, 1.4, 0.0])


@pytest.mark.parametrize(("targets", "measured", "phrase"), [
    ([[0.9, 0], [1.05, 0], [1.0, 0]], (0.85, 0), "joint pan: target 1.0500 at step 1 is beyond its limits"),
    ([[0.5, 0], [0.5, 0], [0.5, 0]], (0.0, 0), "joint pan: the first target 0.5000 is 0.5000 from where the arm starts"),
    ([[0.0, 0.2], [0.0, 0.7], [0.0, 0.7]], (0.0, 0.0), "joint roll: step 1 would move at up to 6.88"),
    ([[0.0, 0.0], [float("nan"), 0.0], [0.0, 0.0]], (0.0, 0.0), "joint pan: target nan at step 1 is not a number"),
])  # fmt: skip
def test_refusals_name_the_joint_and_the_numbers(targets, measured, phrase):
    with pytest.raises(EngineError) as err:
        _check(targets, measured)
    assert err.value.code == ErrorCode.OUT_OF_RANGE and phrase in err.value.message


def test_each_joint_has_its_own_margin_and_start_jump():
    """Per-joint tolerances (a prismatic joint's in m beside revolute ones in rad): 0.03 past the limit is clamped
    where the margin is 0.05 and refused where it is 0.02; a first target 0.2 away passes a 0.3 jump, not a 0.1."""
    targets = np.array([[0.9, 0.0], [1.03, 0.0], [1.0, 0.0]])
    safe = check_targets(targets, TIMES, np.array([0.85, 0.0]), NAMES, LIMITS, np.array([0.05, 0.0]), 0.3)
    np.testing.assert_allclose(safe.positions[:, 0], [0.9, 1.0, 1.0])
    with pytest.raises(EngineError, match="by more than limit_margin 0.02$"):
        check_targets(targets, TIMES, np.array([0.85, 0.0]), NAMES, LIMITS, np.array([0.02, 0.05]), 0.3)
    ramp = np.array([[0.0, 0.2], [0.0, 0.25], [0.0, 0.3]])
    assert check_targets(ramp, TIMES, np.zeros(2), NAMES, LIMITS, 0.02, np.array([0.1, 0.3])).clamped == 0
    with pytest.raises(EngineError, match="joint roll: the first target 0.2000 is 0.2000 .* over max_start_jump 0.1$"):
        check_targets(ramp, TIMES, np.zeros(2), NAMES, LIMITS, 0.02, np.array([0.3, 0.1]))


def test_a_moving_start_is_checked_as_the_controller_plays_it():
    """A joint_trajectory_controller starts a new trajectory from its measured state, moving: pan at +1.8/s with
    its first target 0.05 behind, 0.2 s out (sent at rest there: the plan turns), is a slow move from rest (0.375/s at
    the cubic's peak) but must turn around from 1.8/s, within the 2.0 limit; at 2.5/s it starts over the limit and is
    refused, naming the start."""
    targets = np.array([[-0.05, 0.0], [-0.05, 0.0]])
    times = np.array([0.2, 0.3])
    safe = check_targets(targets, times, np.zeros(2), NAMES, LIMITS, 0.02, np.inf)
    assert np.array_equal(safe.velocities[0], [0.0, 0.0])
    check_moving_start(safe, 0.2, np.zeros(2), np.array([1.8, 0.0]), NAMES, LIMITS)
    with pytest.raises(EngineError, match=r"joint pan: the first segment from 0.0000 at 2.500/s .* up to 2.500/s"):
        check_moving_start(safe, 0.2, np.zeros(2), np.array([2.5, 0.0]), NAMES, LIMITS)
    with pytest.raises(EngineError, match=r"joint roll: .* at -5.000/s"):  # the joint over its limit, not the first
        check_moving_start(safe, 0.2, np.zeros(2), np.array([1.0, -5.0]), NAMES, LIMITS)


def _reference_peaks(path: np.ndarray, velocities: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per joint, the largest |p'| and |p''| over the trajectory: each segment's cubic solved from its four Hermite
    conditions (numpy's linear solver), sampled densely."""
    speed, acceleration = np.zeros(path.shape[1]), np.zeros(path.shape[1])
    for i in range(len(times) - 1):
        t0, t1 = times[i], times[i + 1]
        system = np.array([[1, t0, t0**2, t0**3], [1, t1, t1**2, t1**3], [0, 1, 2 * t0, 3 * t0**2],
                           [0, 1, 2 * t1, 3 * t1**2]])  # fmt: skip
        t = np.linspace(t0, t1, 1001)
        for joint in range(path.shape[1]):
            c = np.linalg.solve(system, [path[i, joint], path[i + 1, joint], velocities[i, joint],
                                         velocities[i + 1, joint]])  # fmt: skip
            speed[joint] = max(speed[joint], np.abs(c[1] + 2 * c[2] * t + 3 * c[3] * t**2).max())
            acceleration[joint] = max(acceleration[joint], np.abs(2 * c[2] + 6 * c[3] * t).max())
    return speed, acceleration


def test_an_acceleration_limit_refuses_a_segment_that_accelerates_harder():
    """With joint_acceleration_limits set, a ramp from rest is checked at its spline's hardest acceleration (as a
    cubic solved independently gives it): just under the limit it passes, just over it is refused, naming the joint.
    Without one (a URDF has none) only speed counts."""
    targets = np.column_stack([1.4 * TIMES, 0.3 * TIMES])
    safe = _check(targets, jump=1.0)
    path = np.vstack([np.zeros(2), safe.positions])
    _, peak = _reference_peaks(path, np.vstack([np.zeros(2), safe.velocities]), np.concatenate([[0.0], TIMES]))
    assert peak[0] > 20.0  # the arm starts from rest: a hard start
    for scale, refused in ((1.001, False), (0.999, True)):
        limits = [JointLimit(-1.0, 1.0, 2.0, peak[0] * scale), JointLimit(-math.inf, math.inf, 4.0, peak[1] * 1.001)]
        if refused:
            with pytest.raises(EngineError, match=rf"joint pan: step \d would accelerate at up to {peak[0]:.3f}/s\^2"):
                check_targets(targets, TIMES, np.zeros(2), NAMES, limits, 0.02, 1.0)
        else:
            check_targets(targets, TIMES, np.zeros(2), NAMES, limits, 0.02, 1.0)
    with pytest.raises(EngineError, match=r"joint roll: the first segment from 0.0000 at 3.000/s .* accelerate"):
        limits = [JointLimit(-1.0, 1.0, 2.0, 1e3), JointLimit(-math.inf, math.inf, 4.0, 10.0)]
        check_moving_start(safe, 0.1, np.zeros(2), np.array([0.0, 3.0]), NAMES, limits)  # 3/s to 0.3/s in 0.1 s


def test_a_steady_motion_is_checked_as_one_not_as_a_start_from_rest():
    """An arm the plan moves at 1.6 rad/s (under the 2.0 limit) going on at that speed: from rest its first cubic
    would peak at 2.13/s, refused; from the plan's own velocity it is a straight line (speed 1.6, acceleration 0 by
    the independently solved cubic)."""
    targets = np.column_stack([1.6 * TIMES, np.zeros(3)])
    limits = [JointLimit(-1.0, 1.0, 2.0, 40.0), JointLimit(-math.inf, math.inf, 4.0, 40.0)]
    with pytest.raises(EngineError, match="joint pan: step 0 would move at up to 2.133"):
        check_targets(targets, TIMES, np.zeros(2), NAMES, limits, 0.02, np.inf)
    safe = check_targets(targets, TIMES, np.zeros(2), NAMES, limits, 0.02, np.inf, np.array([1.6, 0.0]))
    path, at = np.vstack([np.zeros(2), safe.positions]), np.concatenate([[0.0], TIMES])
    velocities = np.vstack([[1.6, 0.0], safe.velocities])
    assert _reference_peaks(path[:2], velocities[:2], at[:2])[1][0] == pytest.approx(0.0, abs=1e-6)
    assert safe.velocities[0, 0] == pytest.approx(1.6) and safe.velocities[-1, 0] == 0.0  # the stop: tested below


def test_a_chunk_cut_off_mid_motion_stops_within_the_limits_later():
    """The plan ends at rest: a steady 1.6 rad/s stopped within its last 0.1 s period would peak at 2.13/s (over
    2.0) and decelerate at 64/s^2 (over 20). Its last target's time is pushed out, in steps, until the stop fits
    both (checked on the independently solved cubic); a stop that cannot fit within MAX_STOP_S is refused."""
    targets, moving = np.column_stack([1.6 * TIMES, np.zeros(3)]), np.array([1.6, 0.0])
    limits = [JointLimit(-1.0, 1.0, 2.0, 20.0), JointLimit(-math.inf, math.inf, 4.0, 20.0)]
    safe = check_targets(targets, TIMES, np.zeros(2), NAMES, limits, 0.02, np.inf, moving)
    np.testing.assert_allclose(safe.times[:2], TIMES[:2])  # only the last target waits
    assert safe.times[2] > TIMES[2] and safe.times[2] - safe.times[1] <= MAX_STOP_S
    path, at = np.vstack([np.zeros(2), safe.positions]), np.concatenate([[0.0], safe.times])
    velocities = np.vstack([moving, safe.velocities])
    speed, acceleration = _reference_peaks(path, velocities, at)
    assert speed[0] <= 2.0 + 1e-9 and acceleration[0] <= 20.0 + 1e-9
    assert np.isclose(safe.velocities[0, 0], 1.6) and safe.velocities[2, 0] == 0.0  # slowing from the second on
    tight = [JointLimit(-1.0, 1.0, 2.0, 0.01), JointLimit(-math.inf, math.inf, 4.0, 0.01)]
    with pytest.raises(EngineError, match="joint pan: step 2 would move at up to 2.133"):  # the stop as it was
        check_targets(targets, TIMES, np.zeros(2), NAMES, tight, 0.02, np.inf, moving)


def _reference_highest(start: float, start_velocity: float, end: float, duration: float) -> float:
    """The highest position of one segment the controller plays: its cubic solved from the four Hermite conditions
    (numpy's linear solver), sampled densely."""
    system = np.array([[1, 0, 0, 0], [1, duration, duration**2, duration**3], [0, 1, 0, 0],
                       [0, 1, 2 * duration, 3 * duration**2]])  # fmt: skip
    c = np.linalg.solve(system, [start, end, start_velocity, 0.0])
    t = np.linspace(0.0, duration, 10001)
    return float((c[0] + c[1] * t + c[2] * t**2 + c[3] * t**3).max())


def test_a_start_entering_fast_towards_a_limit_it_stops_on_is_refused_where_its_cubic_passes_the_limit():
    """pan 0.02 below its upper limit (1.0), moving up, its first target on the limit 0.2 s out (at rest there): the
    controller's cubic from that moving start bulges past the limit, though every speed is within 2.0/s. At 0.5/s
    by 2.6 mrad, within limit_margin 0.02 (an arm settling onto a limit as the next chunk comes): played; at 1.5/s
    by 30 mrad: refused naming the limit and by how much, as the sampled cubic has it."""
    targets, times = np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([0.2, 0.3])
    safe = check_targets(targets, times, np.array([0.98, 0.0]), NAMES, LIMITS, 0.02, np.inf)
    assert 0.002 < _reference_highest(0.98, 0.5, 1.0, 0.2) - 1.0 < 0.02
    check_moving_start(safe, 0.2, np.array([0.98, 0.0]), np.array([0.5, 0.0]), NAMES, LIMITS)
    past = _reference_highest(0.98, 1.5, 1.0, 0.2) - 1.0
    assert past > 0.02
    with pytest.raises(EngineError, match=rf"joint pan: the first segment .* would pass its upper position limit "
                                          rf"1.0000 by {past:.4f}, more than 0.02 \(limit_margin"):  # fmt: skip
        check_moving_start(safe, 0.2, np.array([0.98, 0.0]), np.array([1.5, 0.0]), NAMES, LIMITS)
    # a limit_margin widened to clamp model targets further out lets the spline pass the limit no further
    wide = check_targets(targets, times, np.array([0.98, 0.0]), NAMES, LIMITS, 0.2, np.inf)
    with pytest.raises(EngineError, match=r"more than 0.02 \(limit_margin, at most 0.02"):
        check_moving_start(wide, 0.2, np.array([0.98, 0.0]), np.array([1.5, 0.0]), NAMES, LIMITS)
    # a start already past the limit (a reading over it) coming back is no overshoot of its own
    check_moving_start(safe, 0.2, np.array([1.03, 0.0]), np.array([0.0, 0.0]), NAMES, LIMITS)
