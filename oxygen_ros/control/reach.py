"""The instruction node's low-level arm controller: reach the named object, grasp it, lift it.

The language model (text only, no action head) names the target; this turns it into action chunks at the control
rate, whatever the model's latency. Actions are end-effector waypoints ``(x, y, z, gripper)`` in the robot's
`base_link` frame (metres; x ahead, y left, z up from the table top; gripper 1 open, 0 closed). A chunk is the
next ``horizon`` waypoints one period apart; the robot executes its first step and the next chunk starts from
there (receding horizon), so a target that moves (the robot drives, the detections refresh) is followed.
"""

import math
import re
from dataclasses import dataclass, replace

import numpy as np

from oxygen_ros.perception.detect import DetectedObject
from oxygen_ros.perception.palette import OBJECT_COLOURS
from oxygen_ros.perception.scene import SHAPES

HOME = (0.2, 0.0, 0.3)
HOVER_Z = 0.12  # approach and lift height above the table
GRASP_Z = 0.02
SPEED_MPS = 0.25
CLOSE_S = 0.5  # time to close the gripper
_REACHED_M = 1e-3
PHASES = ("approach", "descend", "close", "lift", "hold")


@dataclass(frozen=True)
class Arm:
    position: tuple[float, float, float] = HOME
    gripper: float = 1.0
    phase: str = "approach"

    def row(self) -> list[float]:
        return [*self.position, self.gripper]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def find_target(texts: list[str], objects: list[DetectedObject]) -> DetectedObject | None:
    """The detected object best named by the first text that names any (colour counts more than shape: "the red
    cup" is the red object whatever its shape); None when no text names a detected object or the robot is not in
    view (no robot-relative position)."""
    for text in texts:
        words = _words(text)
        colours, shapes = words & set(OBJECT_COLOURS), words & set(SHAPES)
        scored = [(2 * (o.colour in colours) + (o.shape in shapes), -i, o) for i, o in enumerate(objects)]
        best = max(scored, default=None, key=lambda s: s[:2])
        if best and best[0] > 0:
            return best[2] if best[2].ahead_cm is not None else None
    return None


def _towards(position: tuple[float, float, float], goal: tuple[float, float, float], step: float):
    """(new position, reached): straight towards ``goal`` by at most ``step`` metres."""
    delta = [g - p for g, p in zip(goal, position, strict=True)]
    distance = math.sqrt(sum(d * d for d in delta))
    if distance <= step + _REACHED_M:
        return goal, True
    return tuple(p + d * step / distance for p, d in zip(position, delta, strict=True)), False


def step(arm: Arm, target: tuple[float, float] | None, dt: float) -> Arm:
    """The arm one period ``dt`` later. Without a target it holds still."""
    if target is None or arm.phase == "hold":
        return arm
    x, y = target
    if arm.phase == "close":
        gripper = max(0.0, arm.gripper - dt / CLOSE_S)
        return replace(arm, gripper=gripper, phase="lift" if gripper == 0.0 else "close")
    goal = {"approach": (x, y, HOVER_Z), "descend": (x, y, GRASP_Z), "lift": (x, y, HOVER_Z)}[arm.phase]
    position, reached = _towards(arm.position, goal, SPEED_MPS * dt)
    phase = PHASES[PHASES.index(arm.phase) + 1] if reached else arm.phase
    return replace(arm, position=position, phase=phase)


def chunk(arm: Arm, target: tuple[float, float] | None, horizon: int, dt: float) -> tuple[np.ndarray, Arm]:
    """The next ``horizon`` waypoints ([horizon, 4] float32) and the arm after the first of them."""
    rows, state = [], arm
    for _ in range(horizon):
        state = step(state, target, dt)
        rows.append(state.row())
    return np.asarray(rows, dtype=np.float32), step(arm, target, dt)
