"""Model units <-> ros2_control units per joint, and the action spaces that can or cannot be commanded."""

import numpy as np
import pytest

from oxygen_ros.control.arm.joint_map import JointMap
from oxygen_ros.errors import EngineError, ErrorCode


def test_degrees_about_a_calibration_mid_become_radians_and_back():
    deg = np.pi / 180
    jm = JointMap.build(["a", "b"], [deg, 0.0004], [0.3, 0.02], "joint_position")  # b: a gripper 0..100 -> 0..4 cm
    actions = np.array([[90.0, 0.0], [-45.0, 100.0]])
    joints = jm.to_joints(actions, None)
    np.testing.assert_allclose(joints, [[np.pi / 2 + 0.3, 0.02], [-np.pi / 4 + 0.3, 0.06]])
    np.testing.assert_allclose(jm.to_model(joints[1]), actions[1])


def test_deltas_start_from_the_state_the_chunk_was_computed_from():
    jm = JointMap.build(["a"], [], [], "joint_delta")
    np.testing.assert_allclose(jm.to_joints(np.array([[0.1], [0.2]]), np.array([1.0])), [[1.1], [1.2]])


def test_a_grippers_actions_stay_absolute_among_deltas():
    """openpi's delta checkpoints (DeltaActions with make_bool_mask(6, -1): ALOHA, DROID, its UR5 example) keep the
    gripper absolute: its target is the action, not the state plus it."""
    jm = JointMap.build(["a", "jaw"], [], [], "joint_delta", absolute=("jaw",))
    np.testing.assert_allclose(jm.to_joints(np.array([[0.1, 0.8]]), np.array([1.0, 0.5])), [[1.1, 0.8]])


@pytest.mark.parametrize("space", ["ee_pose", "ee_delta", "joint_velocity"])
def test_spaces_without_an_inverse_kinematics_are_refused(space):
    with pytest.raises(EngineError) as err:
        JointMap.build(["a"], [], [], space)
    assert err.value.code == ErrorCode.FAILED_PRECONDITION and space in err.value.message


@pytest.mark.parametrize(("scale", "offset", "phrase"), [
    ([1.0, 2.0], [], "action_scale has 2 values for 1 joints"),
    ([0.0], [], "nonzero"),
    ([], [float("inf")], "action_offset must be finite"),
])  # fmt: skip
def test_bad_maps_name_the_parameter(scale, offset, phrase):
    with pytest.raises(EngineError, match=phrase):
        JointMap.build(["a"], scale, offset, "joint_position")
