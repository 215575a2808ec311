"""What a joint_trajectory_controller's parameters say of where it starts a trajectory and whether it wraps a freely
turning joint (``control.arm.controller_setup``), for the parameter sets each distro's controller declares
(ros2_controllers' joint_trajectory_controller_parameters.yaml: humble ad559d9 has open_loop_control and per-joint
gains with angle_wraparound / normalize_error; jazzy ed360c9 adds interpolate_from_desired_state and drops the
wraparound gains; master 94e74de drops open_loop_control), and the refusal when the user's word disagrees."""

import pytest

from oxygen_ros.control.arm.controller_setup import asked, disagreement, setup_of

WRIST = "wrist_roll"


def humble(**changed) -> dict:
    """A Humble JTC's answers to ``asked([WRIST])`` at its defaults (interpolate_from_desired_state not declared)."""
    values = dict.fromkeys(asked([WRIST]), False) | {"state_interfaces": ["position", "velocity"]}
    return values | {"interpolate_from_desired_state": None} | changed


def jazzy(**changed) -> dict:
    values = dict.fromkeys(asked([WRIST])) | {"state_interfaces": ["position", "velocity"]}
    return values | {"interpolate_from_desired_state": False, "open_loop_control": False} | changed


def kilted(**changed) -> dict:
    return jazzy(open_loop_control=None) | changed


def test_the_names_asked_are_the_start_and_each_turning_joints_wraparound():
    assert asked([WRIST]) == ["state_interfaces", "interpolate_from_desired_state", "open_loop_control",
                              f"gains.{WRIST}.angle_wraparound", f"gains.{WRIST}.normalize_error"]  # fmt: skip
    assert asked([]) == ["state_interfaces", "interpolate_from_desired_state", "open_loop_control"]


@pytest.mark.parametrize(("values", "starts_from"), [
    (humble(), "measured"),
    (jazzy(), "measured"),
    (kilted(), "measured"),
    (humble(open_loop_control=True), "commanded"),
    (jazzy(interpolate_from_desired_state=True), "commanded"),
    (kilted(interpolate_from_desired_state=True, state_interfaces=["position"]), "commanded"),  # its last command
    (humble(state_interfaces=["position"]), "measured_at_rest"),
    (jazzy(state_interfaces=["position", "acceleration"]), "measured_at_rest"),
])  # fmt: skip
def test_where_each_distros_controller_starts_a_trajectory(values, starts_from):
    assert setup_of(values, [WRIST]).starts_from == starts_from


def test_a_node_without_state_interfaces_is_no_joint_trajectory_controller():
    assert setup_of(dict.fromkeys(asked([WRIST])), [WRIST]) is None
    assert setup_of({"state_interfaces": "position"}, []) is None  # a string parameter of another node


def test_only_humbles_gains_can_say_a_turning_joint_is_not_wrapped():
    assert setup_of(humble(), [WRIST]).unwrapped == (WRIST,)
    assert setup_of(humble(**{f"gains.{WRIST}.angle_wraparound": True}), [WRIST]).unwrapped == ()
    assert setup_of(humble(**{f"gains.{WRIST}.normalize_error": True}), [WRIST]).unwrapped == ()  # the older name
    assert setup_of(jazzy(), [WRIST]).unwrapped == ()  # from the controller manager's robot_description: unseen
    assert setup_of(humble(), []).unwrapped == ()  # no joint turns freely


def test_a_controller_starting_elsewhere_than_the_user_said_refuses_naming_the_setting_to_use():
    setup = setup_of(jazzy(state_interfaces=["position"]), [])
    assert disagreement("measured", setup, "/arm_controller") == (
        "/arm_controller starts each trajectory from the measured position at rest (its state_interfaces ['position'] "
        "lack velocity), but controller_starts_from is measured: set controller_starts_from: measured_at_rest")
    assert disagreement("measured_at_rest", setup, "/arm_controller") == ""
    setup = setup_of(humble(open_loop_control=True), [])
    assert disagreement("measured", setup, "/c") == ("/c starts each trajectory from its own last command (its "
                                                     "open_loop_control is true), but controller_starts_from is "
                                                     "measured: set controller_starts_from: commanded")  # fmt: skip
    setup = setup_of(jazzy(), [])
    assert disagreement("commanded", setup, "/c") == (
        "/c starts each trajectory from the measured state (its state_interfaces ['position', 'velocity'] include "
        "velocity and its interpolate_from_desired_state is false and its open_loop_control is false), but "
        "controller_starts_from is commanded: set controller_starts_from: measured")


def test_an_unwrapped_turning_joint_refuses_naming_the_gain_and_the_bounds():
    message = disagreement("measured", setup_of(humble(), [WRIST]), "/arm_controller")
    assert message.startswith(f"joint {WRIST} turns freely, but /arm_controller compares it without wraparound (its "
                              f"gains.{WRIST}.angle_wraparound is false)")  # fmt: skip
    assert message.endswith("bound the joint with joint_lower_limits and joint_upper_limits")
