"""What a joint_trajectory_controller's own parameters say about how it plays our trajectories, so that
``controller_starts_from`` and the wrist's wraparound are read from the controller instead of taken on the user's word.

A chunk's first segment is checked, and a hold timed, from where the controller starts a new trajectory: its measured
state; from rest where its ``state_interfaces`` lack velocity (it clears the velocities it reads); its own last
command with ``interpolate_from_desired_state`` (Jazzy on) or ``open_loop_control`` (Humble; deprecated in Jazzy,
gone in Kilted). A joint that turns freely is played the short way round only where the controller wraps it: Humble's
``gains.<joint>.angle_wraparound`` (or the older ``normalize_error``); from Jazzy on the controller takes continuous
joints from the robot_description the controller manager gets, which no parameter of the controller shows.
(ros2_controllers humble ad559d9 / jazzy ed360c9 / master 94e74de: joint_trajectory_controller_parameters.yaml,
joint_trajectory_controller.cpp.)
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

STATE_INTERFACES = "state_interfaces"
FROM_COMMAND = ("interpolate_from_desired_state", "open_loop_control")
WRAP_FLAGS = ("angle_wraparound", "normalize_error")
WHERE = {"measured": "the measured state", "measured_at_rest": "the measured position at rest",
         "commanded": "its own last command"}  # fmt: skip


def asked(turning_joints: Sequence[str]) -> list[str]:
    """The controller's parameters read: how it starts a trajectory, and whether it wraps each of ``turning_joints``."""
    wraps = [f"gains.{joint}.{flag}" for joint in turning_joints for flag in WRAP_FLAGS]
    return [STATE_INTERFACES, *FROM_COMMAND, *wraps]


@dataclass(frozen=True)
class ControllerSetup:
    starts_from: str  # measured | measured_at_rest | commanded (arm_io.STARTS_FROM)
    why: str  # the parameters that say so, for a message
    unwrapped: tuple[str, ...]  # turning joints it compares without wraparound (only Humble's gains can say so)


def setup_of(values: dict[str, Any], turning_joints: Sequence[str]) -> ControllerSetup | None:
    """The setup ``values`` (parameter name -> value, None where the controller has no such parameter) describe;
    None when they are no joint_trajectory_controller's (no ``state_interfaces``)."""
    interfaces = values.get(STATE_INTERFACES)
    if not isinstance(interfaces, list):
        return None
    commanding = [name for name in FROM_COMMAND if values.get(name) is True]
    if commanding:
        starts_from, why = "commanded", f"its {commanding[0]} is true"
    elif "velocity" not in interfaces:
        starts_from, why = "measured_at_rest", f"its state_interfaces {interfaces} lack velocity"
    else:
        declared = [name for name in FROM_COMMAND if values.get(name) is not None]
        starts_from, why = "measured", f"its state_interfaces {interfaces} include velocity" + \
            "".join(f" and its {name} is false" for name in declared)  # fmt: skip
    flags = {joint: [values.get(f"gains.{joint}.{flag}") for flag in WRAP_FLAGS] for joint in turning_joints}
    unwrapped = tuple(joint for joint, said in flags.items() if False in said and True not in said)
    return ControllerSetup(starts_from, why, unwrapped)


def disagreement(claimed: str, setup: ControllerSetup, controller: str) -> str:
    """Why goals are refused with ``setup`` read from ``controller`` while ``controller_starts_from`` is ``claimed``
    ('' = nothing): chunks would be checked, and holds timed, from a state the controller does not start from."""
    if setup.starts_from != claimed:
        return (f"{controller} starts each trajectory from {WHERE[setup.starts_from]} ({setup.why}), but "
                f"controller_starts_from is {claimed}: set controller_starts_from: {setup.starts_from}")  # fmt: skip
    if setup.unwrapped:
        joint = setup.unwrapped[0]
        return (f"joint {joint} turns freely, but {controller} compares it without wraparound (its "
                f"gains.{joint}.angle_wraparound is false): it would turn it the long way round to a target across "
                f"the driver's wrap at pi; set that true, or bound the joint with joint_lower_limits and "
                f"joint_upper_limits")  # fmt: skip
    return ""
