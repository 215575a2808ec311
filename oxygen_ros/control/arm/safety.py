"""What the arm may be told: joint targets checked against the limits and the measured state before anything moves.

A model's target a little past a position limit (within ``margin``: rounding, a blended step) is clamped onto it; one
further out is refused, as is a first target more than ``max_start_jump`` from where the arm is (a stale or wrong
state, a chunk from another pose), a step faster than the joint's velocity limit (the arm's speed from the measured
state to the first target included), and anything not finite. A refusal is an OUT_OF_RANGE error naming the joint,
the step and the numbers; the caller holds the arm. The checks only ever narrow what the model asked for: clamping
moves a target inside the limits, never past them, and no check widens a limit.
"""

from dataclasses import dataclass

import numpy as np

from oxygen_ros.control.arm.joint_limits import JointLimit
from oxygen_ros.errors import EngineError, ErrorCode


@dataclass(frozen=True)
class SafeTargets:
    positions: np.ndarray  # [n, J], inside the limits
    velocities: np.ndarray  # [n, J], the last row 0 (a joint_trajectory_controller refuses a moving end)
    clamped: int  # targets moved onto a limit


def _refuse(message: str) -> EngineError:
    return EngineError(ErrorCode.OUT_OF_RANGE, message)


def check_targets(targets: np.ndarray, times: np.ndarray, measured: np.ndarray, names: tuple[str, ...],
                  limits: list[JointLimit], margin: float, max_start_jump: float) -> SafeTargets:  # fmt: skip
    """``targets`` [n, J] due at ``times`` [n] seconds from now (increasing, > 0), from the arm at ``measured`` [J]."""
    if not np.isfinite(targets).all():
        step, joint = np.argwhere(~np.isfinite(targets))[0]
        raise _refuse(f"joint {names[joint]}: target {targets[step, joint]} at step {step} is not a number")
    lower = np.array([lim.lower for lim in limits])
    upper = np.array([lim.upper for lim in limits])
    beyond = (targets < lower - margin) | (targets > upper + margin)
    if beyond.any():
        step, joint = np.argwhere(beyond)[0]
        raise _refuse(f"joint {names[joint]}: target {targets[step, joint]:.4f} at step {step} is beyond its limits "
                      f"[{lower[joint]:.4f}, {upper[joint]:.4f}] by more than limit_margin {margin}")  # fmt: skip
    clamped = np.clip(targets, lower, upper)
    jump = np.abs(clamped[0] - measured)
    if (jump > max_start_jump).any():
        joint = int(np.argmax(jump))
        raise _refuse(f"joint {names[joint]}: the first target {clamped[0, joint]:.4f} is {jump[joint]:.4f} from the "
                      f"measured {measured[joint]:.4f}, over max_start_jump {max_start_jump}")  # fmt: skip
    path = np.vstack([measured, clamped])
    dt = np.diff(np.concatenate([[0.0], times]))
    speed = np.abs(np.diff(path, axis=0)) / dt[:, None]
    fast = speed > np.array([lim.velocity for lim in limits])
    if fast.any():
        step, joint = np.argwhere(fast)[0]
        raise _refuse(f"joint {names[joint]}: step {step} would move at {speed[step, joint]:.3f}/s, over its velocity "
                      f"limit {limits[joint].velocity}")  # fmt: skip
    return SafeTargets(clamped, _velocities(clamped, times), int((clamped != targets).sum()))


def _velocities(positions: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Central differences (one-sided at the start), 0 at the end: smooth cubic segments in the controller."""
    out = np.zeros_like(positions)
    if len(positions) > 2:
        out[1:-1] = (positions[2:] - positions[:-2]) / (times[2:] - times[:-2])[:, None]
    if len(positions) > 1:
        out[0] = (positions[1] - positions[0]) / (times[1] - times[0])
    return out
