"""Targets are clamped within a small margin, refused beyond it, refused when they start far from the measured
state or move a joint faster than its limit; velocities end at zero."""

import math

import numpy as np
import pytest

from oxygen_ros.control.arm.joint_limits import JointLimit
from oxygen_ros.control.arm.safety import check_targets
from oxygen_ros.errors import EngineError, ErrorCode

NAMES = ("pan", "roll")
LIMITS = [JointLimit(-1.0, 1.0, 2.0), JointLimit(-math.inf, math.inf, 4.0)]
TIMES = np.array([0.1, 0.2, 0.3])


def _check(targets, measured=(0.0, 0.0), margin=0.02, jump=0.3):
    return check_targets(np.asarray(targets, float), TIMES, np.asarray(measured, float), NAMES, LIMITS, margin, jump)


def test_within_the_margin_is_clamped_onto_the_limit():
    safe = _check([[0.1, 0.0], [0.3, 0.1], [0.45, 0.2]], measured=(0.0, 0.0), margin=0.02)
    assert safe.clamped == 0
    safe = check_targets(np.array([[0.9, 0.0], [1.01, 0.0], [1.015, 0.0]]), TIMES, np.array([0.85, 0.0]), NAMES,
                         LIMITS, 0.02, 0.3)  # fmt: skip
    np.testing.assert_allclose(safe.positions[:, 0], [0.9, 1.0, 1.0])
    assert safe.clamped == 2 and (safe.positions[:, 0] <= 1.0).all()
    np.testing.assert_allclose(safe.velocities[-1], 0.0)
    np.testing.assert_allclose(safe.velocities[1, 0], (1.0 - 0.9) / 0.2)


@pytest.mark.parametrize(("targets", "measured", "phrase"), [
    ([[0.9, 0], [1.05, 0], [1.0, 0]], (0.85, 0), "joint pan: target 1.0500 at step 1 is beyond its limits"),
    ([[0.5, 0], [0.5, 0], [0.5, 0]], (0.0, 0), "joint pan: the first target 0.5000 is 0.5000 from the measured"),
    ([[0.0, 0.2], [0.0, 0.7], [0.0, 0.7]], (0.0, 0.0), "joint roll: step 1 would move at 5.000/s"),
    ([[0.0, 0.0], [float("nan"), 0.0], [0.0, 0.0]], (0.0, 0.0), "joint pan: target nan at step 1 is not a number"),
])  # fmt: skip
def test_refusals_name_the_joint_and_the_numbers(targets, measured, phrase):
    with pytest.raises(EngineError) as err:
        _check(targets, measured)
    assert err.value.code == ErrorCode.OUT_OF_RANGE and phrase in err.value.message
