"""`instruction_node` through real rclpy nodes and the real SmolLM2 (no action head, so the controller path):
chunks at the requested rate on /arm/action_chunk and as feedback (Cartesian waypoints, never sent to an arm's
controller as if they were joints: nothing on /arm/chunk_trace), moving towards the named object, narration from the language head, a prompt CANCELED with no KV block leaked by the in-flight narration,
INVALID_ARGUMENT for bad goals and UNAVAILABLE while the inference node is absent."""

import math
import time

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from inference_client import MODEL_TIMEOUT, Capture, pool_stats
from oxygen_ros.action import FollowInstruction
from oxygen_ros.msg import ActionChunk, ChunkTrace
from ros_harness import send_goal, wait_until
from task_graph import task_graph

from oxygen_ros.nodes.instruction_node import InstructionNode

RED_TRIANGLE = "pick up the red triangle"  # seed 0: the red triangle is ahead of the robot, on its right


@pytest.fixture(scope="module")
def graph(ros_domain_id):
    parameters = {"service_wait_s": 0.5, "narration_period_s": 1.0, "max_new_tokens": 24}
    with task_graph(ros_domain_id, InstructionNode, **parameters) as (graph, _):
        graph.chunks = Capture(graph.client, ActionChunk, "/arm/action_chunk", 100)
        graph.traces = Capture(graph.client, ChunkTrace, "/arm/chunk_trace", 100)
        yield graph


def follow(graph, instruction: str, rate_hz: float, duration_s: float):
    goal = FollowInstruction.Goal(instruction=instruction, rate_hz=rate_hz, duration_s=duration_s)
    return send_goal(graph.client, FollowInstruction, "/follow_instruction", goal)


def test_unavailable_while_the_inference_node_is_absent(graph):
    start = time.monotonic()
    out = follow(graph, RED_TRIANGLE, 10.0, 1.0).result()
    assert out.status == GoalStatus.STATUS_ABORTED
    assert (out.result.success, out.result.error_code, out.result.chunks_sent) == (False, "UNAVAILABLE", 0)
    assert time.monotonic() - start < 5.0
    graph.start_inference()


def _check_the_rate(chunks: list, result) -> tuple[np.ndarray, int]:
    """Chunks go out one period (0.1 s) apart and nothing waits on the language head (its calls take seconds); a
    stall of the whole process on these two shared cores over a period loses that period (never a burst): the chunks
    sent and the periods visibly lost in their stamps cover the goal, the reported rate is the stamps' rate, and
    with no period lost it is 10 Hz within 5%. The gaps between the chunks' stamps, and the schedule's slots."""
    gaps = np.diff([c.header.stamp.sec + c.header.stamp.nanosec * 1e-9 for c in chunks])
    periods = round(gaps.sum() / 0.1) + 1  # the schedule's slots from the first chunk to the last
    lost = periods - result.chunks_sent  # a late tick keeps the schedule; only a stall over a period loses one
    # the slots a stall spans beyond its own (a 0.37 s gap: up to 3; a tick late by under a period runs at once and
    # the next keeps the schedule, so the gap after it can be ~0: the CI of 48e9184 saw 0.367 then 0.0007, 2 lost)
    visible = int(np.maximum(np.round(gaps / 0.1) - 1, 0).sum())
    assert 0 <= lost <= visible, (result.chunks_sent, periods, gaps)
    assert math.isclose(result.achieved_rate_hz, len(gaps) / gaps.sum(), rel_tol=0.02), result.achieved_rate_hz
    if not lost:
        assert 9.5 <= result.achieved_rate_hz <= 10.5, result.achieved_rate_hz
    return gaps, periods


def test_streams_chunks_at_the_requested_rate_towards_the_named_object(graph):
    before = len(graph.chunks.messages)
    goal = follow(graph, RED_TRIANGLE, 10.0, 3.0)
    out = goal.result(timeout=30.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    result = out.result
    wait_until(lambda: len(graph.chunks.messages) - before >= result.chunks_sent, 5.0, "every chunk")
    chunks = graph.chunks.messages[before:]
    assert len(chunks) == result.chunks_sent and len(goal.feedback) == result.chunks_sent
    assert len({c.task_id for c in chunks}) == 1
    for chunk in chunks:
        assert (chunk.horizon, chunk.action_dim, chunk.header.frame_id) == (10, 4, "base_link")
        assert math.isclose(chunk.period_s, 0.1, rel_tol=1e-6) and len(chunk.actions) == 40
    gaps, periods = _check_the_rate(chunks, result)
    assert abs(np.median(gaps) - 0.1) < 0.01 and gaps.max() < 0.5, gaps
    assert 29 <= periods <= 31, (result.chunks_sent, periods, gaps)
    first, last = (np.reshape(c.actions, (10, 4))[0] for c in (chunks[0], chunks[-1]))
    assert last[0] > first[0] + 0.2 and last[1] < first[1], "the hand moves ahead and right, to the red triangle"
    assert not graph.traces.messages, "end-effector waypoints are not joints: no controller may take them"


def test_narrates_and_a_cancel_stops_the_stream_without_leaking_blocks(graph):
    before = len(graph.chunks.messages)
    goal = follow(graph, RED_TRIANGLE, 10.0, 0.0)  # until cancelled
    wait_until(lambda: any(f.narration for f in goal.feedback), MODEL_TIMEOUT, "a narration")
    narration = next(f.narration for f in goal.feedback if f.narration)
    assert not narration.startswith("(language head"), narration
    wait_until(lambda: pool_stats(graph.client).active_requests > 0, 30.0, "the next narration call in flight")
    cancelled_at = time.monotonic()
    goal.cancel()
    out = goal.result()
    assert time.monotonic() - cancelled_at < 2.0, "the goal ends within a few control periods"
    assert out.status == GoalStatus.STATUS_CANCELED
    assert (out.result.error_code, out.result.success) == ("CANCELLED", False)
    # the language head decoded meanwhile on the same two cores: the stream still keeps its rate
    assert out.result.chunks_sent > 0
    wait_until(lambda: len(graph.chunks.messages) - before >= out.result.chunks_sent, 5.0, "every chunk")
    _check_the_rate(graph.chunks.messages[before:], out.result)
    time.sleep(0.3)
    assert len(graph.chunks.messages) - before == out.result.chunks_sent, "no chunk after the goal ended"
    graph.idle_pool()  # the abandoned narration finished or was dropped, and its blocks came back


@pytest.mark.parametrize(
    "instruction, rate_hz, duration_s, complaint",
    [
        ("", 10.0, 1.0, "instruction is empty"),
        ("  ", 10.0, 1.0, "instruction is empty"),
        (RED_TRIANGLE, 0.0, 1.0, "rate_hz"),
        (RED_TRIANGLE, -5.0, 1.0, "rate_hz"),
        (RED_TRIANGLE, 1000.0, 1.0, "rate_hz"),
        (RED_TRIANGLE, math.nan, 1.0, "rate_hz"),
        (RED_TRIANGLE, 10.0, -1.0, "duration_s"),
        (RED_TRIANGLE, 10.0, math.nan, "duration_s"),
    ],
)
def test_bad_goals_are_aborted_with_invalid_argument(graph, instruction, rate_hz, duration_s, complaint):
    out = follow(graph, instruction, rate_hz, duration_s).result()
    assert out.status == GoalStatus.STATUS_ABORTED
    assert (out.result.error_code, out.result.chunks_sent) == ("INVALID_ARGUMENT", 0)
    assert complaint in out.result.message
