"""Continuous joints (a URDF ``continuous`` joint: no position limits, a wrist that turns freely) are read and
commanded as angles, and two angles of one are the same pose a whole turn apart: a driver reporting them in
[-pi, pi] wraps where a plan, built from readings, runs on past pi. Differences of such joints are taken the short
way round, and a plan's targets are moved by whole turns next to where the arm is, so a wrap is neither a tracking
error nor a full turn of the wrist (a joint_trajectory_controller without ``angle_wraparound`` would make it)."""

import math

import numpy as np

from oxygen_ros.control.arm.joint_limits import JointLimit

TURN = 2 * math.pi


def turning(limits: list[JointLimit]) -> np.ndarray:
    """[J] bool: the joints that turn freely (no position limit either way)."""
    return np.array([lim.lower == -math.inf and lim.upper == math.inf for lim in limits], dtype=bool)


def difference(a: np.ndarray, b: np.ndarray, turns: np.ndarray) -> np.ndarray:
    """``a - b``, the short way round (within half a turn) on the joints ``turns`` marks."""
    out = np.asarray(a, dtype=np.float64) - b
    out[..., turns] -= TURN * np.round(out[..., turns] / TURN)
    return out


def beside(targets: np.ndarray, anchor: np.ndarray, turns: np.ndarray) -> np.ndarray:
    """``targets`` [n, J] moved by whole turns, on the joints ``turns`` marks, so that the first is within half a turn
    of ``anchor`` [J] (the rest keep their steps from it)."""
    shift = (anchor + difference(targets[0], anchor, turns)) - targets[0]
    return targets + np.where(turns, shift, 0.0)
