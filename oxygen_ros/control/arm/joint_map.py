"""A chunk's action dimensions -> the arm's joints in ros2_control units, and the arm's joint state -> the model's.

A policy acts in its dataset's units: LeRobot's SO-100 / SO-101 in -100..100 of each joint's calibrated range (its
follower's default) or in degrees about the range's middle (``use_degrees``), grippers 0..100; openpi / ALOHA
checkpoints in radians. ros2_control wants radians and
metres. So each dimension has an affine map, ``joint = scale * action + offset`` (identity by default), and the state
the model reads is the inverse of the same map. The action space says what a dimension means:

* ``joint_position``: an absolute joint target (LeRobot's ``<motor>.pos`` actions);
* ``joint_delta``: a target relative to the state the chunk was computed from (a checkpoint trained on deltas), but
  for the gripper, which stays absolute (openpi's ``DeltaActions`` mask: a jaw is commanded open or closed);

anything else (end-effector poses or deltas, joint velocities) needs an inverse kinematics or a velocity interface
this package does not have, and is refused rather than guessed.
"""

from dataclasses import dataclass

import numpy as np

from oxygen_ros.errors import EngineError, ErrorCode

ACTION_SPACES = ("joint_position", "joint_delta")
REFUSED_SPACES = ("ee_pose", "ee_delta", "joint_velocity")


@dataclass(frozen=True)
class JointMap:
    names: tuple[str, ...]
    scale: np.ndarray  # [J] per joint; nonzero
    offset: np.ndarray  # [J]
    space: str = "joint_position"
    absolute: tuple[str, ...] = ()  # joints whose actions stay absolute under joint_delta (the gripper)

    @classmethod
    def build(cls, names: list[str], scale: list[float], offset: list[float], space: str,
              absolute: tuple[str, ...] = ()) -> "JointMap":  # fmt: skip
        """INVALID_ARGUMENT naming what is wrong: lengths, a zero or non-finite scale; FAILED_PRECONDITION for an action
        space this package cannot command."""
        if space in REFUSED_SPACES:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"action_space {space} needs an inverse kinematics or a "
                              "velocity interface that oxygen_ros does not have: map it to joint_position targets")  # fmt: skip
        if space not in ACTION_SPACES:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"action_space must be one of {ACTION_SPACES}, got {space!r}")
        n = len(names)
        s = np.ones(n) if not scale else np.asarray(scale, dtype=np.float64)
        o = np.zeros(n) if not offset else np.asarray(offset, dtype=np.float64)
        for label, values in (("action_scale", s), ("action_offset", o)):
            if values.shape != (n,):
                raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{label} has {values.size} values for {n} joints")
            if not np.isfinite(values).all():
                raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{label} must be finite, got {values.tolist()}")
        if (s == 0).any():
            raise EngineError(ErrorCode.INVALID_ARGUMENT, "action_scale must be nonzero for every joint")
        return cls(tuple(names), s, o, space, absolute)

    def to_joints(self, actions: np.ndarray, state: np.ndarray | None) -> np.ndarray:
        """[H, J] model actions -> joint targets; ``state`` (model units, [J]) is the chunk's origin for deltas."""
        if self.space == "joint_delta":
            assert state is not None, "joint_delta chunks need the state they were computed from"
            actions = actions + np.where([name in self.absolute for name in self.names], 0.0, state)
        return actions * self.scale + self.offset

    def to_model(self, joints: np.ndarray) -> np.ndarray:
        """Joint positions [J] -> the model's units (what it reads as its state)."""
        return (joints - self.offset) / self.scale
