"""What a joint_trajectory_controller's parameters say of where it starts a trajectory and whether it wraps a freely
turning joint (``control.arm.controller_setup``), for the parameter sets each distro's controller declares
(ros2_controllers' joint_trajectory_controller_parameters.yaml: humble ad559d9 has open_loop_control and per-joint
gains with angle_wraparound / normalize_error, and declares whatever its YAML sets; jazzy ed360c9 adds
interpolate_from_desired_state and drops the wraparound gains; kilted drops open_loop_control; master 94e74de adds
allow_trajectory_replacement, default true), and the refusal when the user's word disagrees."""

import pytest

from oxygen_ros.control.arm.controller_setup import asked, disagreement, setup_of

JOINTS = ["shoulder", "wrist_roll"]
WRIST = "wrist_roll"
NAMES = asked(JOINTS, [WRIST])


def humble(**changed) -> dict:
    """A Humble JTC's answers to NAMES at its defaults (later distros' names not declared)."""
    values = dict.fromkeys(NAMES) | {"state_interfaces": ["position", "velocity"], "open_loop_control": False}
    gains = {f"gains.{joint}.{flag}": False for joint in JOINTS for flag in ("angle_wraparound", "normalize_error")}
    return values | {name: value for name, value in gains.items() if name in NAMES} | changed


def jazzy(**changed) -> dict:
    values = dict.fromkeys(NAMES) | {"state_interfaces": ["position", "velocity"]}
    return values | {"interpolate_from_desired_state": False, "open_loop_control": False} | changed


def kilted(**changed) -> dict:
    return jazzy(open_loop_control=None) | changed


def master(**changed) -> dict:
    return kilted(allow_trajectory_replacement=True) | changed


def test_the_names_asked_are_the_start_the_distro_and_each_turning_joints_wraparound():
    assert NAMES == ["state_interfaces", "interpolate_from_desired_state", "open_loop_control",
                     "allow_trajectory_replacement", "joints", "allow_partial_joints_goal",
                     "gains.shoulder.normalize_error",
                     f"gains.{WRIST}.angle_wraparound", f"gains.{WRIST}.normalize_error"]  # fmt: skip
    assert asked([WRIST], [WRIST]).count(f"gains.{WRIST}.normalize_error") == 1


@pytest.mark.parametrize(("values", "starts_from", "from_command"), [
    (humble(), "measured", False),
    (jazzy(), "measured", False),
    (kilted(), "measured", False),
    (master(allow_trajectory_replacement=False), "measured", False),
    (jazzy(state_interfaces=["position", "velocity", "acceleration"]), "measured", False),
    (humble(open_loop_control=True), "commanded", True),
    (jazzy(open_loop_control=True), "commanded", True),  # deprecated there, still honoured
    (jazzy(interpolate_from_desired_state=True), "commanded", True),
    (kilted(interpolate_from_desired_state=True, state_interfaces=["position"]), "commanded", True),
    # a chunk replacing a moving one starts from the one playing; after a hold, from the measured state
    (master(), "commanded", False),
    (humble(state_interfaces=["position"]), "measured_at_rest", False),
    (jazzy(state_interfaces=["position"]), "measured_at_rest", False),
    # Humble declares what its YAML sets: a later distro's name it never reads says nothing there
    (humble(interpolate_from_desired_state=True, allow_trajectory_replacement=True), "measured", False),
])  # fmt: skip
def test_where_each_distros_controller_starts_a_trajectory(values, starts_from, from_command):
    setup = setup_of(values, JOINTS, [WRIST])
    assert (setup.starts_from, setup.from_command) == (starts_from, from_command)


def test_a_node_without_both_kinds_of_parameters_is_no_joint_trajectory_controller():
    assert setup_of(dict.fromkeys(NAMES), JOINTS, [WRIST]) is None
    assert setup_of({"state_interfaces": "position"}, JOINTS, []) is None  # a string parameter of another node
    # Universal Robots' passthrough_trajectory_controller: state_interfaces, but the robot interpolates
    assert setup_of(dict.fromkeys(NAMES) | {"state_interfaces": ["position", "velocity"]}, JOINTS, []) is None


def test_only_humbles_gains_can_say_a_turning_joint_is_not_wrapped():
    assert setup_of(humble(), JOINTS, [WRIST]).unwrapped == ((WRIST, "angle_wraparound"),)
    assert setup_of(humble(**{f"gains.{WRIST}.angle_wraparound": True}), JOINTS, [WRIST]).unwrapped == ()
    assert setup_of(humble(**{f"gains.{WRIST}.normalize_error": True}), JOINTS, [WRIST]).unwrapped == ()
    # a release before angle_wraparound (2.25): only the older name is there to set
    older = humble(**{f"gains.{WRIST}.angle_wraparound": None})
    assert setup_of(older, JOINTS, [WRIST]).unwrapped == ((WRIST, "normalize_error"),)
    assert setup_of(jazzy(), JOINTS, [WRIST]).unwrapped == ()  # from the controller manager's robot_description
    assert setup_of(humble(), JOINTS, []).unwrapped == ()  # no joint turns freely


def test_a_controller_without_the_arms_velocity_cannot_hold_an_acceleration_limit():
    """Its state_interfaces lacking velocity, a joint_trajectory_controller plays each trajectory's first segment as
    a straight line from the measured position (a step in velocity): joints with an acceleration limit refuse the
    goal naming the remedy, whatever controller_starts_from says (a driver reporting no velocity leaves measured
    agreeing with it); with every limit waived (.inf: none accelerated) it plays on; one starting from its command
    has no such step."""
    at_rest = setup_of(jazzy(state_interfaces=["position"]), JOINTS, [])
    for claimed in ("measured_at_rest", "measured"):
        said = disagreement(claimed, at_rest, "/arm_controller", velocity_reported=False, accelerated=[WRIST])
        assert said == (f"/arm_controller plays each trajectory's first segment as a straight line from the measured "
                        f"position (its state_interfaces ['position'] lack velocity), a step in velocity that "
                        f"joint_acceleration_limits of ['{WRIST}'] cannot hold: set its interpolate_from_desired_state "
                        "(Humble: open_loop_control) and controller_starts_from: commanded, or waive those limits "
                        "with .inf")
    assert disagreement("measured_at_rest", at_rest, "/arm_controller", accelerated=[]) == ""
    commanding = setup_of(jazzy(state_interfaces=["position"], interpolate_from_desired_state=True), JOINTS, [])
    assert disagreement("commanded", commanding, "/arm_controller", accelerated=[WRIST]) == ""


def test_a_controller_starting_elsewhere_than_the_user_said_refuses_naming_the_setting_to_use():
    setup = setup_of(jazzy(state_interfaces=["position"]), JOINTS, [])
    assert disagreement("measured", setup, "/arm_controller") == (
        "/arm_controller starts each trajectory from the measured position at rest (its state_interfaces ['position'] "
        "lack velocity), but controller_starts_from is measured: set controller_starts_from: measured_at_rest")
    assert disagreement("measured_at_rest", setup, "/arm_controller") == ""
    # a node answering a long list of long names: the message quotes a few, cut short
    many = setup_of(jazzy(state_interfaces=["position", "x" * 500, *map(str, range(10_000))]), JOINTS, [])
    assert many.why == f"its state_interfaces ['position', '{'x' * 32}', '0', '...'] (10002 entries) lack velocity"
    # a driver reporting no velocity: measured starts every joint from rest too
    assert disagreement("measured", setup, "/arm_controller", velocity_reported=False) == ""
    assert disagreement("commanded", setup, "/arm_controller", velocity_reported=False).endswith(
        "set controller_starts_from: measured_at_rest")
    setup = setup_of(humble(open_loop_control=True), JOINTS, [])
    assert disagreement("measured", setup, "/c") == ("/c starts each trajectory from its own last command (its "
                                                     "open_loop_control is true), but controller_starts_from is "
                                                     "measured: set controller_starts_from: commanded")  # fmt: skip
    setup = setup_of(jazzy(), JOINTS, [])
    assert disagreement("commanded", setup, "/c") == (
        "/c starts each trajectory from the measured state (its state_interfaces ['position', 'velocity'] include "
        "velocity and its interpolate_from_desired_state is false and its open_loop_control is false), but "
        "controller_starts_from is commanded: set controller_starts_from: measured")
    assert disagreement("measured", setup_of(master(), JOINTS, []), "/c") == (
        "/c starts each trajectory from its own last command (its allow_trajectory_replacement is true: one replacing "
        "a moving one starts from it), but controller_starts_from is measured: set controller_starts_from: commanded")


def test_an_unwrapped_turning_joint_refuses_naming_the_gain_and_the_bounds_beside_any_other_problem():
    message = disagreement("measured", setup_of(humble(), JOINTS, [WRIST]), "/arm_controller")
    assert message.startswith(f"joint {WRIST} turns freely, but /arm_controller compares it without wraparound (its "
                              f"gains.{WRIST}.angle_wraparound is false)")  # fmt: skip
    assert message.endswith("bound the joint with joint_lower_limits and joint_upper_limits")
    both = disagreement("commanded", setup_of(humble(), JOINTS, [WRIST]), "/arm_controller")
    assert both.split("; ")[0].endswith("set controller_starts_from: measured") and both.endswith(message)


def test_joints_the_controller_does_not_play_or_that_the_trajectory_lacks_refuse_naming_them():
    """A controller per arm: its `joints` must be the trajectory's (a JTC rejects a joint it lacks, and a trajectory
    of only some of its joints unless allow_partial_joints_goal), so a wrong split refuses the goal before the arms
    move instead of one arm's controller rejecting its first chunk; a node that does not say is not judged."""
    assert disagreement("measured", setup_of(jazzy(joints=JOINTS), JOINTS, []), "/left") == ""
    assert disagreement("measured", setup_of(jazzy(), JOINTS, []), "/left") == ""  # no joints said
    assert disagreement("measured", setup_of(jazzy(joints=["shoulder"]), JOINTS, []), "/left") == (
        "/left does not play joints ['wrist_roll'] (not among its joints): it would reject every trajectory; check "
        "action_joint_names and, with a controller per arm, trajectory_actions and trajectory_joint_counts")
    more = jazzy(joints=[*JOINTS, "right_elbow"])
    assert disagreement("measured", setup_of(more, JOINTS, []), "/left") == (
        "/left also plays joints ['right_elbow'] and takes only trajectories of all its joints (its "
        "allow_partial_joints_goal is false): send them in its trajectory (action_joint_names, its share of "
        "trajectory_joint_counts; a jaw it plays is none of gripper_joint_names), or take them out of its joints")
    assert disagreement("measured", setup_of(more | {"allow_partial_joints_goal": True}, JOINTS, []), "/left") == ""
