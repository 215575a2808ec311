"""`vqa_node` through real rclpy nodes and the real SmolLM2: UNAVAILABLE while the inference node is absent and an
answer as soon as it is back (also after a restart), answers about the latest or a named camera frame that reuse
the frame's prefix, the `/vqa/ask` action streaming its answer as feedback and a cancel ending it, INVALID_ARGUMENT /
NOT_FOUND for bad questions, and no KV block left held afterwards."""

import time

import pytest
from action_msgs.msg import GoalStatus
from inference_client import MODEL_TIMEOUT, Capture, wait_for_observation
from oxygen_ros.action import AskQuestion as AskQuestionAction
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.srv import AskQuestion
from ros_harness import call_service, send_goal
from task_graph import TOTAL_BLOCKS, task_graph

from oxygen_ros.nodes.vqa_node import VqaNode
from oxygen_ros.perception.scene import SHAPES

MAX_NEW_TOKENS = 16


@pytest.fixture(scope="module")
def graph(ros_domain_id):
    with task_graph(ros_domain_id, VqaNode, service_wait_s=0.5) as (graph, _):
        graph.frames = Capture(graph.client, ObservationMsg, "/oxygen/observation")
        yield graph


def ask(graph, question: str, **fields) -> AskQuestion.Response:
    request = AskQuestion.Request(question=question, max_new_tokens=MAX_NEW_TOKENS, **fields)
    return call_service(graph.client, AskQuestion, "/vqa/ask", request, MODEL_TIMEOUT)


def test_unavailable_while_the_inference_node_is_absent_then_answers(graph):
    start = time.monotonic()
    absent = ask(graph, "What objects are on the table?")
    assert (absent.success, absent.error_code) == (False, "UNAVAILABLE")
    assert "/oxygen/infer" in absent.message and absent.answer == ""
    assert time.monotonic() - start < 5.0, "an absent inference node must be reported quickly"
    graph.start_inference()
    answer = ask(graph, "What shape is the red object?")  # seed 0 has a red triangle
    assert answer.success, answer.message
    assert any(shape in answer.answer.lower() for shape in SHAPES), f"no shape named in {answer.answer!r}"
    assert answer.latency_ms > 0


def test_answers_about_a_named_frame_and_reuses_its_prefix(graph):
    # a frame with a successor: the inference node has both its image and its text (they arrive separately)
    seen = len(graph.frames.messages)
    graph.frames.wait_for(lambda msg: graph.frames.messages.index(msg) > seen, what="two new frames")
    frame = graph.frames.messages[seen].observation_id
    wait_for_observation(graph.client, frame)  # the inference node took it too (its own subscription)
    first = ask(graph, "Which object is closest to the robot?", observation_id=frame)
    second = ask(graph, "Which object is furthest to the left?", observation_id=frame)
    assert first.success and second.success, (first.message, second.message)
    assert first.answer and second.answer
    assert second.reused_prefix_tokens > 0, "the second question about a frame reuses its prefix from the pool"


LONG_ANSWERS = ("Count from one to two hundred, in words.", "Describe every object on the table in great detail.",
                "Write a long story about this robot and the objects around it.",
                "List the numbers from one to one hundred, one per line.")


def test_the_ask_action_streams_the_answer_and_a_cancel_frees_its_blocks(graph):
    goal = AskQuestionAction.Goal(question="Which object is closest to the robot?", max_new_tokens=MAX_NEW_TOKENS)
    asked = send_goal(graph.client, AskQuestionAction, "/vqa/ask", goal, timeout=30)
    done = asked.result(MODEL_TIMEOUT)
    assert done.status == GoalStatus.STATUS_SUCCEEDED and done.result.success, done.result.message
    assert asked.streamed_text(done.result.answer, strip=True) == done.result.answer != ""
    assert len(asked.feedback) >= 2
    assert done.result.reused_prefix_tokens > 0  # at least the system turn's head, shared by every question
    # Cancelled at its first feedback: the real model's greedy answer may end first (one answered "100" and stopped
    # within 0.3 s), so questions whose answers run long are tried until one is caught mid-stream.
    for question in LONG_ANSWERS:
        long = AskQuestionAction.Goal(question=question, max_new_tokens=200)
        counting = send_goal(graph.client, AskQuestionAction, "/vqa/ask", long, timeout=30)
        counting.wait_feedback(1, MODEL_TIMEOUT)
        counting.cancel()
        ended = counting.result(30)
        if ended.status != GoalStatus.STATUS_SUCCEEDED:
            break
        assert ended.result.success and ended.result.message in ("stop", "length"), ended.result.message
    assert ended.status == GoalStatus.STATUS_CANCELED and ended.result.error_code == "CANCELLED", ended.result
    graph.idle_pool(30)


def test_bad_questions_get_a_clear_error_code(graph):
    for question in ("", "   \n"):
        empty = ask(graph, question)
        assert (empty.success, empty.error_code, empty.message) == (False, "INVALID_ARGUMENT", "the question is empty")
    unknown = ask(graph, "What is on the table?", observation_id="no-such-frame")
    assert (unknown.success, unknown.error_code) == (False, "NOT_FOUND") and "no-such-frame" in unknown.message


def test_recovers_after_the_inference_node_restarts_and_leaks_no_block(graph):
    graph.stop_inference()
    gone = ask(graph, "What objects are on the table?")
    assert (gone.success, gone.error_code) == (False, "UNAVAILABLE")
    graph.start_inference()
    back = ask(graph, "Is the path ahead clear?")
    assert back.success and back.answer, back.message
    stats = graph.idle_pool()
    assert stats.total_blocks == TOTAL_BLOCKS and stats.prefix_hit_rate >= 0.0
