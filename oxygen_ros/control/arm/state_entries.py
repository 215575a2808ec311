"""What each entry of a robot state is: one joint's position or its velocity. A LeRobot dataset names its state's
entries `<motor>.pos` (and `<motor>.vel` where it records velocities), a ros2_control robot names joints; so an entry
of `state_joint_names` is a joint (its position), or a joint with `.pos` or `.vel` (its position, its velocity: the
JointState's `velocity` field, which a driver may leave empty; such an entry is then missing, named, never zero)."""

import math
from collections.abc import Sequence
from dataclasses import dataclass

SUFFIXES = {".pos": False, ".vel": True}
MAX_SPEED = 1e3  # rad/s or m/s: a reported velocity beyond it is a driver's garbage, kept out of the model's state


@dataclass(frozen=True)
class StateEntry:
    name: str  # as configured
    joint: str  # the JointState name it reads
    velocity: bool  # its velocity, else its position


def state_entries(names: tuple[str, ...] | list[str]) -> tuple[StateEntry, ...]:
    """One entry per name, in order (names are checked for being distinct and bounded where they are declared)."""
    out = []
    for name in names:
        suffix = next((s for s in SUFFIXES if name.endswith(s) and len(name) > len(s)), "")
        out.append(StateEntry(name, name[: len(name) - len(suffix)], SUFFIXES.get(suffix, False)))
    return tuple(out)


def reported_velocities(names: int, velocity: Sequence[float]) -> list[float]:
    """A JointState's velocity per name as the state may use it: finite and within MAX_SPEED, else NaN (missing,
    named); all NaN when the field does not give one per name (drivers often leave it empty)."""
    if len(velocity) != names:
        return [math.nan] * names
    return [float(v) if math.isfinite(v) and abs(v) <= MAX_SPEED else math.nan for v in velocity]
