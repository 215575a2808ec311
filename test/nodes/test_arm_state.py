"""The state instruction_node sends with a chunk request: state_joint_names' positions and, named LeRobot's way
(`<joint>.vel`), velocities, an action joint's in the model's units (position: minus the offset, over the scale;
velocity: over the scale), read from real JointState messages; a velocity the driver does not publish is
FAILED_PRECONDITION naming the entry, never a zero."""

import math

import numpy as np
import pytest
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import JointState

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes import arm_io, gripper_io
from oxygen_ros.nodes.arm_io import NAME_LISTS, NUMBER_LISTS, ArmIO


def _arm(node: Node, **lists) -> ArmIO:
    parameters = arm_io.PARAMETERS | gripper_io.PARAMETERS  # instruction_node's defaults
    settings = {name: default for name, (default, _) in parameters.items()} | {"input_timeout_s": 60.0}
    return ArmIO(node, settings, {name: [] for name in (*NAME_LISTS, *NUMBER_LISTS)} | lists, ReentrantCallbackGroup())


def test_positions_and_velocities_in_the_models_units(ros_context):
    node = Node("arm_state_test", context=ros_context)
    try:
        arm = _arm(node, action_joint_names=["wrist", "jaw"], action_scale=[0.5, 2.0], action_offset=[1.0, 0.0],
                   state_joint_names=["wrist.pos", "wrist.vel", "base", "base.vel", "jaw"])  # fmt: skip
        msg = JointState(name=["base", "wrist", "jaw"], position=[0.3, 2.0, 1.0], velocity=[0.1, 0.25, -4.0])
        msg.header.stamp = node.get_clock().now().to_msg()
        arm._on_state(msg)
        state, origin = arm.snapshot()
        # wrist: (2 - 1) / 0.5 and 0.25 / 0.5; base (no action joint): as measured; jaw: 1 / 2
        np.testing.assert_allclose(state, [2.0, 0.5, 0.3, 0.1, 0.5])
        np.testing.assert_allclose(origin, [2.0, 0.5])
        msg.velocity = []  # a driver that publishes positions only
        arm._on_state(msg)
        with pytest.raises(EngineError) as err:
            arm.snapshot()
        assert err.value.code == ErrorCode.FAILED_PRECONDITION and "state entry wrist.vel" in err.value.message
        for garbage in (math.nan, 1e30):  # not a number, or no speed an arm has: missing, never in the state
            msg.velocity = [0.1, garbage, 0.0]
            arm._on_state(msg)
            with pytest.raises(EngineError, match="no velocity for joint wrist"):
                arm.snapshot()
    finally:
        node.destroy_node()
