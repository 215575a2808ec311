"""A bimanual robot through the ROS graph, as a 14-dim ALOHA checkpoint drives one (here the tiny pi0 checkpoint's 7
dimensions: the left arm's two joints and jaw, then the right arm's three joints and jaw): instruction_node splits
each chunk between two joint_trajectory_controllers (arm_sim under /left and /right, `trajectory_actions`,
`trajectory_joint_counts`) and two gripper controllers (gripper_sim, `gripper_actions`), closed loop: the goal
succeeds, both arms and both jaws move, each on its own controller, and every joint stays inside its limits."""

import math
import numpy as np
import pytest
from inference_client import Capture
from pi0_folders import ACTION_DIM, STATE_DIM, served
from rclpy.parameter import Parameter
from ros_harness import wait_until
from sensor_msgs.msg import JointState
from task_graph import task_graph

from oxygen_ros.nodes.gripper_sim import GripperSim
from oxygen_ros.nodes.instruction_node import InstructionNode

LEFT, RIGHT = ["left_joint_0", "left_joint_1"], ["right_joint_0", "right_joint_1", "right_joint_2"]
JAWS = ["left_jaw", "right_jaw"]
JOINTS = [*LEFT, JAWS[0], *RIGHT, JAWS[1]]  # the model's order, as ALOHA's: each arm, then its jaw
LIMIT, SPEED, JAW_RANGE = 50.0, 1000.0, (-50.0, 50.0)  # random weights act noisily: wide limits
ARM = {"action_joint_names": JOINTS, "state_joint_names": JOINTS[:STATE_DIM],
       "trajectory_actions": ["/left/arm_controller/follow_joint_trajectory",
                              "/right/arm_controller/follow_joint_trajectory"],
       "trajectory_joint_counts": [len(LEFT), len(RIGHT)], "gripper_joint_names": JAWS,
       "gripper_actions": ["/left/gripper_controller/gripper_cmd", "/right/gripper_controller/gripper_cmd"],
       "gripper_max_effort": 10.0, "joint_lower_limits": [-LIMIT] * ACTION_DIM,
       "joint_upper_limits": [LIMIT] * ACTION_DIM, "joint_velocity_limits": [SPEED] * ACTION_DIM,
       "joint_acceleration_limits": [math.inf] * ACTION_DIM,  # waived (.inf): random weights jolt
       "max_start_jump": 10.0, "max_tracking_error": 10.0, "input_timeout_s": 1.0}  # fmt: skip


@pytest.fixture(scope="module")
def graph(ros_domain_id, tmp_path_factory):
    assert len(JOINTS) == ACTION_DIM
    inference = served(tmp_path_factory.mktemp("pi0"))
    with task_graph(ros_domain_id, InstructionNode, inference, narration_period_s=30.0, max_new_tokens=2,
                    **ARM) as (g, _):  # fmt: skip
        for side, joints, jaw in (("left", LEFT, JAWS[0]), ("right", RIGHT, JAWS[1])):
            g.add_arm(joints, namespace=side, state_topic="/joint_states")
            g.executor.add_node(GripperSim(context=g.context, namespace=side, parameter_overrides=[
                Parameter("joint_name", value=jaw), Parameter("lower", value=JAW_RANGE[0]),
                Parameter("upper", value=JAW_RANGE[1]), Parameter("velocity", value=SPEED),
                Parameter("state_topic", value="/joint_states")]))  # fmt: skip
        g.states = Capture(g.client, JointState, "/joint_states", 4000)
        g.start_inference()
        g.wait_for_frame()
        wait_until(lambda: {n for m in g.states.messages for n in m.name} >= set(JOINTS), 10.0, "every joint's state")
        yield g


def test_a_vla_drives_both_arms_and_both_jaws_each_on_its_own_controller(graph):
    before = len(graph.states.messages)
    graph.follow("hand the cup over")
    seen: dict[str, list[float]] = {name: [] for name in JOINTS}
    for msg in graph.states.messages[before:]:
        for name, position in zip(msg.name, msg.position):
            seen[name].append(position)
    for name in JOINTS:  # each joint went with its plan, on its own controller (arm_sim refuses joints it lacks)
        q = np.array(seen[name])
        assert np.abs(q - q[0]).max() > 1e-3, f"{name} moved"
        assert np.abs(q).max() <= LIMIT
    graph.idle_pool()
