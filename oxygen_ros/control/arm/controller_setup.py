"""What a joint_trajectory_controller's own parameters say about how it plays our trajectories, so that the user's
``controller_starts_from`` and the wrist's wraparound are checked against the controller, not only taken on trust.

A chunk's first segment is checked, and a hold timed, from where the controller starts a new trajectory: its measured
state; from rest where its ``state_interfaces`` lack velocity (it clears the velocities it reads); its own last
command with ``interpolate_from_desired_state`` (Jazzy on) or ``open_loop_control`` (Humble and Jazzy; gone in
Kilted); and from the trajectory playing, where a new one replaces a moving one, with ``allow_trajectory_replacement``
(Rolling's, default true: the hand-off is the old trajectory sampled now, so it plays as from its command). A Humble
controller declares whatever parameter its YAML sets (controller_interface's node options before rclcpp 21), so the
later distros' names count only where no Humble parameter is there (``gains.<joint>.normalize_error``, which no later
controller has). A joint that turns freely is played the short way round only where the controller wraps it:
Humble's ``gains.<joint>.angle_wraparound`` (or the older ``normalize_error``; ros2_controllers 2.34 on also unwraps a
trajectory's start); from Jazzy on the controller takes continuous joints from the robot_description the controller
manager gets, which no parameter shows. Its ``joints`` are the joints it plays: a trajectory naming one it lacks is
rejected, and one naming only some of them too unless ``allow_partial_joints_goal`` (so a robot with a controller
per arm is checked for the joints each gets). A node with ``state_interfaces`` but neither start parameter
(Universal Robots' passthrough controller, whose robot interpolates) is no joint_trajectory_controller.
(ros2_controllers humble ad559d9 / jazzy ed360c9 / master 94e74de: joint_trajectory_controller_parameters.yaml,
joint_trajectory_controller.cpp.)
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

STATE_INTERFACES = "state_interfaces"
FROM_COMMAND = ("interpolate_from_desired_state", "open_loop_control")
HUMBLE_FROM_COMMAND = ("open_loop_control",)
REPLACEMENT = "allow_trajectory_replacement"
JOINTS = "joints"
PARTIAL = "allow_partial_joints_goal"
WRAP_FLAGS = ("angle_wraparound", "normalize_error")
WHERE = {"measured": "the measured state", "measured_at_rest": "the measured position at rest",
         "commanded": "its own last command"}  # fmt: skip
STARTS_FROM = tuple(WHERE)  # controller_starts_from's values
AT_REST = {"measured", "measured_at_rest"}  # the same where the driver reports no velocity: from rest either way
SHOWN = 4  # state_interfaces entries a message quotes (a JTC's has at most three: position, velocity, acceleration)
NAME_CHARS = 32  # of each entry quoted


def _humble_marker(joints: Sequence[str]) -> str | None:
    """A parameter only a Humble controller has (per joint, so the trajectory's first)."""
    return f"gains.{joints[0]}.normalize_error" if joints else None


def _quoted(interfaces: list) -> str:
    """A state_interfaces list as a message quotes it: what the controller answered is cut to a few short names."""
    shown = [str(name)[:NAME_CHARS] for name in interfaces[:SHOWN]]
    return f"{shown}" if len(interfaces) <= SHOWN else f"{shown[:-1] + ['...']} ({len(interfaces)} entries)"


def asked(joints: Sequence[str], turning_joints: Sequence[str]) -> list[str]:
    """The controller's parameters read: how it starts a trajectory, whether it is Humble's (by the first of the
    trajectory's ``joints``), and whether it wraps each of ``turning_joints``."""
    wraps = [f"gains.{joint}.{flag}" for joint in turning_joints for flag in WRAP_FLAGS]
    marker = _humble_marker(joints)
    return list(dict.fromkeys([STATE_INTERFACES, *FROM_COMMAND, REPLACEMENT, JOINTS, PARTIAL,
                               *([marker] if marker else []), *wraps]))  # fmt: skip


@dataclass(frozen=True)
class ControllerSetup:
    starts_from: str  # one of STARTS_FROM
    why: str  # the parameters that say so, for a message
    unwrapped: tuple[tuple[str, str], ...]  # (joint, the flag that says so) it compares without wraparound
    from_command: bool  # it starts every trajectory from its command (not only one replacing a moving one)
    unowned: tuple[str, ...] = ()  # of the trajectory's joints, those it does not play (it rejects the trajectory)
    unsent: tuple[str, ...] = ()  # of its joints, those the trajectory lacks, when it takes no partial goal


def setup_of(values: dict[str, Any], joints: Sequence[str], turning_joints: Sequence[str]) -> ControllerSetup | None:
    """The setup ``values`` (parameter name -> value, None where the controller has no such parameter) describe;
    None when they are no joint_trajectory_controller's."""
    interfaces = values.get(STATE_INTERFACES)
    if not isinstance(interfaces, list) or all(values.get(name) is None for name in FROM_COMMAND):
        return None
    marker = _humble_marker(joints)
    humble = marker is not None and values.get(marker) is not None
    honoured = HUMBLE_FROM_COMMAND if humble else FROM_COMMAND
    commanding = [name for name in honoured if values.get(name) is True]
    if commanding:
        starts_from, why = "commanded", f"its {commanding[0]} is true"
    elif not humble and values.get(REPLACEMENT) is True:
        starts_from, why = "commanded", f"its {REPLACEMENT} is true: one replacing a moving one starts from it"
    elif "velocity" not in interfaces:
        starts_from, why = "measured_at_rest", f"its state_interfaces {_quoted(interfaces)} lack velocity"
    else:
        declared = [name for name in (*honoured, REPLACEMENT) if values.get(name) is not None]
        starts_from, why = "measured", f"its state_interfaces {_quoted(interfaces)} include velocity" + \
            "".join(f" and its {name} is false" for name in declared)  # fmt: skip
    unwrapped = []
    for joint in turning_joints:
        said = {flag: values.get(f"gains.{joint}.{flag}") for flag in WRAP_FLAGS}
        if True not in said.values() and False in said.values():
            unwrapped.append((joint, next(flag for flag, value in said.items() if value is False)))
    owned = values.get(JOINTS)
    unowned, unsent = (), ()
    if isinstance(owned, list):  # (a node that does not say plays whatever it takes)
        theirs, ours = {str(joint) for joint in owned}, set(joints)
        unowned = tuple(joint for joint in joints if joint not in theirs)
        partial = values.get(PARTIAL) is True
        unsent = () if partial else tuple(str(joint) for joint in owned if str(joint) not in ours)
    return ControllerSetup(starts_from, why, tuple(unwrapped), bool(commanding), unowned, unsent)


def disagreement(claimed: str, setup: ControllerSetup, controller: str, velocity_reported: bool = True,
                 accelerated: Sequence[str] = ()) -> str:  # fmt: skip
    """Why goals are refused with ``setup`` read from ``controller`` while ``controller_starts_from`` is ``claimed``
    ('' = nothing): chunks would be checked, and holds timed, from a state the controller does not start from, a
    controller without the arm's velocity would break the acceleration limits of joints ``accelerated`` (its first
    segment is a straight line from the measured position: ros2_controllers' Trajectory::interpolate_between_points
    has no velocity to start from), or a turning joint would turn the long way. ``velocity_reported``: the driver
    reports the joints' velocity (without, measured and measured_at_rest both start every joint from rest)."""
    problems = []
    same = not velocity_reported and {setup.starts_from, claimed} <= AT_REST
    if setup.starts_from != claimed and not same:
        problems.append(f"{controller} starts each trajectory from {WHERE[setup.starts_from]} ({setup.why}), but "
                        f"controller_starts_from is {claimed}: set controller_starts_from: {setup.starts_from}")  # fmt: skip
    if setup.starts_from == "measured_at_rest" and accelerated:
        problems.append(f"{controller} plays each trajectory's first segment as a straight line from the measured "
                        f"position ({setup.why}), a step in velocity that joint_acceleration_limits of "
                        f"{_quoted(list(accelerated))} cannot hold: set its interpolate_from_desired_state (Humble: "
                        "open_loop_control) and controller_starts_from: commanded, or waive those limits with .inf")  # fmt: skip
    if setup.unowned:
        problems.append(f"{controller} does not play joints {_quoted(list(setup.unowned))} (not among its joints): "
                        "it would reject every trajectory; check action_joint_names and, with a controller per "
                        "arm, trajectory_actions and trajectory_joint_counts")  # fmt: skip
    if setup.unsent:
        problems.append(f"{controller} also plays joints {_quoted(list(setup.unsent))} and takes only trajectories "
                        "of all its joints (its allow_partial_joints_goal is false): send them in its trajectory "
                        "(action_joint_names, its share of trajectory_joint_counts; a jaw it plays is none of "
                        "gripper_joint_names), or take them out of its joints")  # fmt: skip
    for joint, flag in setup.unwrapped:
        problems.append(f"joint {joint} turns freely, but {controller} compares it without wraparound (its "
                        f"gains.{joint}.{flag} is false): it would turn it the long way round to a target across the "
                        f"driver's wrap at pi; set gains.{joint}.angle_wraparound: true in its YAML (read when it is "
                        f"configured; ros2_controllers 2.34 on also unwraps a trajectory's start), or bound the joint "
                        f"with joint_lower_limits and joint_upper_limits")  # fmt: skip
    return "; ".join(problems)
