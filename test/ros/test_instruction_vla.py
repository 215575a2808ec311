"""`instruction_node` with a VLA model (pi05-causal-tiny, random weights): the action probe succeeds, so the chunks come
from the model's action head through /oxygen/infer (its horizon x 32 actions, one request in flight at a time, each
due within one period) instead of the node's controller, a JointTrajectory for the configured joint names, and no
KV block is left held afterwards; with allow_random_weights false (a robot's config) the same goal is refused."""

import pytest
from action_msgs.msg import GoalStatus
from inference_client import Capture
from oxygen_ros.action import FollowInstruction
from ros_harness import send_goal
from task_graph import task_graph
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.nodes.instruction_node import InstructionNode

PI05_TINY = {"model": "pi05-causal-tiny", "kv_cache_bytes": 256 << 20, "max_model_len": 2048, "observation_ring": 64,
             "allow_random_weights": True}  # fmt: skip
ACTION_DIM = 32  # pi0.5's action width
JOINTS = [f"arm_joint_{i}" for i in range(ACTION_DIM)]


@pytest.fixture(scope="module")
def graph(ros_domain_id):
    with task_graph(ros_domain_id, InstructionNode, PI05_TINY, narration_period_s=30.0, max_new_tokens=2,
                    joint_names=JOINTS) as (g, _):  # fmt: skip
        g.trajectories = Capture(g.client, JointTrajectory, "/arm/joint_trajectory", 100)
        g.start_inference()
        yield g


def test_chunks_come_from_the_action_head(graph):
    # CPU: one pi05-causal-tiny chunk takes ~0.5 s, so 1 Hz leaves each request its period to be served
    goal = FollowInstruction.Goal(instruction="pick up the red triangle", rate_hz=1.0, duration_s=5.0)
    handle = send_goal(graph.client, FollowInstruction, "/follow_instruction", goal)
    out = handle.result(timeout=60.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    # the probe's chunk and at least one per-tick chunk (a chunk later than its period is dropped, not sent)
    assert out.result.chunks_sent >= 2 and 0.2 <= out.result.achieved_rate_hz <= 1.2, out.result
    chunks = [f.chunk for f in handle.feedback]
    assert len(chunks) == out.result.chunks_sent
    for chunk in chunks:
        assert chunk.action_dim == ACTION_DIM and len(chunk.actions) == chunk.horizon * ACTION_DIM
        assert chunk.task_id == chunks[0].task_id and chunk.header.frame_id == "base_link"
    assert len({tuple(c.actions) for c in chunks}) == len(chunks), "each chunk is a fresh inference"
    last = graph.trajectories.wait_for(lambda t: t.header.stamp == chunks[-1].header.stamp)
    assert last.joint_names == JOINTS and len(last.points) == chunks[-1].horizon
    assert last.points[0].positions.tolist() == list(chunks[-1].actions[:ACTION_DIM])
    graph.idle_pool()


def test_a_rate_the_model_cannot_keep_still_ends_on_time(graph):
    """At 20 Hz every chunk misses its 50 ms deadline on this CPU and is dropped; the goal must still end after its
    duration (counted from the start of streaming, not from a first chunk that never comes)."""
    goal = FollowInstruction.Goal(instruction="pick up the red triangle", rate_hz=20.0, duration_s=2.0)
    handle = send_goal(graph.client, FollowInstruction, "/follow_instruction", goal)
    out = handle.result(timeout=60.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    assert out.result.chunks_sent <= 40  # at most the 2 s worth: none arrives late and is sent anyway
    graph.idle_pool()


def test_a_random_weight_model_sends_no_actions_unless_allowed(graph):
    graph.stop_inference()
    graph.inference_parameters = PI05_TINY | {"allow_random_weights": False}
    graph.start_inference()
    before = len(graph.trajectories.messages)
    goal = FollowInstruction.Goal(instruction="pick up the red triangle", rate_hz=1.0, duration_s=2.0)
    out = send_goal(graph.client, FollowInstruction, "/follow_instruction", goal).result(timeout=60.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert (out.result.error_code, out.result.chunks_sent) == ("FAILED_PRECONDITION", 0)
    assert "random weights" in out.result.message and "allow_random_weights" in out.result.message
    assert len(graph.trajectories.messages) == before
