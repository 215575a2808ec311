"""pi0 (not pi0.5) through the ROS graph: a tiny checkpoint saved by transformers' PI0ForConditionalGeneration (its
continuous state projection, a 7-dim action, chunks of 5) served by the inference node drives a 7-joint simulated
ros2_control arm from instruction_node, closed loop: the goal succeeds, every chunk reaches the controller traced
with the request that computed it, and the arm moves inside its limits and speeds."""

import math
import numpy as np
import pytest
from inference_client import Capture
from oxygen_ros.msg import ChunkTrace
from pi0_folders import ACTION_DIM, STATE_DIM, served
from ros_harness import wait_until
from sensor_msgs.msg import JointState
from task_graph import task_graph

from oxygen_ros.nodes.instruction_node import InstructionNode

JOINTS = [f"joint_{i}" for i in range(ACTION_DIM)]
LIMIT, SPEED = 50.0, 1000.0  # random weights act noisily: wide limits, checked all the same
ARM = {"action_joint_names": JOINTS, "state_joint_names": JOINTS[:STATE_DIM], "joint_lower_limits": [-LIMIT] * ACTION_DIM,
       "joint_upper_limits": [LIMIT] * ACTION_DIM, "joint_velocity_limits": [SPEED] * ACTION_DIM,
       "joint_acceleration_limits": [math.inf] * ACTION_DIM,  # waived (.inf): random weights jolt
       "max_start_jump": 10.0, "max_tracking_error": 10.0, "input_timeout_s": 1.0}  # fmt: skip


@pytest.fixture(scope="module")
def graph(ros_domain_id, tmp_path_factory):
    inference = served(tmp_path_factory.mktemp("pi0"))
    with task_graph(ros_domain_id, InstructionNode, inference, narration_period_s=30.0, max_new_tokens=2,
                    **ARM) as (g, _):  # fmt: skip
        g.add_arm(JOINTS)
        g.states = Capture(g.client, JointState, "/joint_states", 1000)
        g.traces = Capture(g.client, ChunkTrace, "/arm/chunk_trace", 100)
        g.start_inference()
        g.wait_for_frame()
        wait_until(lambda: g.states.messages, 10.0, "the arm's joint state")
        yield g


def test_a_pi0_checkpoint_drives_the_arm(graph):
    before = len(graph.states.messages)
    result = graph.follow("pick up the red block")
    wait_until(lambda: len(graph.traces.messages) >= result.chunks_sent, 5.0, "every chunk's trace")
    traces = graph.traces.messages[: result.chunks_sent]
    assert [t.chunk_id for t in traces] == list(range(result.chunks_sent))
    assert len({t.request_id for t in traces}) == len(traces) and all(t.observation_id for t in traces)
    q = np.array([m.position for m in graph.states.messages[before:]])
    times = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in graph.states.messages[before:]])
    assert np.abs(q - q[0]).max() > 1e-3, "the arm moved"
    assert np.abs(q).max() <= LIMIT
    assert (np.abs(np.diff(q, axis=0)) / np.maximum(np.diff(times), 1e-3)[:, None]).max() <= SPEED * 1.01
    graph.idle_pool()
