"""A task node whose `/oxygen/infer` server vanishes mid-call answers UNAVAILABLE within a second, not after
infer_timeout_s: a dead server never answers. Also when a new server took its place at once (a restarted inference
node never got the request): the call watches the server it went to, not whether some server is there."""

import threading
import time

import pytest
from oxygen_ros.srv import AskQuestion, Infer
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.task import Future
from ros_harness import spin_nodes, wait_for

from oxygen_ros.nodes.infer_client import ANSWER_SLACK_S, SETTLE_S, InferClient
from oxygen_ros.nodes.vqa_node import VqaNode

INFER_TIMEOUT_S = 30.0


def _silent_server(context, received: threading.Event) -> Node:
    """An `/oxygen/infer` that takes every request and never answers (a process about to die)."""
    node = Node("silent_inference", context=context)

    async def never(request: Infer.Request, response: Infer.Response) -> Infer.Response:
        received.set()
        return await Future(executor=node.executor)

    node.create_service(Infer, "/oxygen/infer", never)
    return node


@pytest.mark.parametrize("replaced", [False, True], ids=["gone", "replaced-at-once"])
def test_a_call_whose_server_vanished_is_answered_unavailable_at_once(ros_context, replaced):
    overrides = [Parameter("infer_timeout_s", value=INFER_TIMEOUT_S), Parameter("service_wait_s", value=0.5)]
    vqa = VqaNode(context=ros_context, parameter_overrides=overrides)
    client = Node("infer_client_test", context=ros_context)
    received = threading.Event()
    with spin_nodes(ros_context, vqa, client) as executor:
        server = _silent_server(ros_context, received)
        executor.add_node(server)
        ask = client.create_client(AskQuestion, "/vqa/ask")
        assert ask.wait_for_service(timeout_sec=10)
        answer = ask.call_async(AskQuestion.Request(question="Is the path ahead clear?"))
        assert received.wait(10), "the question reached /oxygen/infer"
        executor.remove_node(server)
        server.destroy_node()
        start = time.monotonic()
        successor = _silent_server(ros_context, threading.Event()) if replaced else None
        if successor:
            executor.add_node(successor)
        out = wait_for(answer, INFER_TIMEOUT_S)
        elapsed = time.monotonic() - start
        if successor:
            executor.remove_node(successor)
            successor.destroy_node()
    assert (out.success, out.error_code) == (False, "UNAVAILABLE"), out.message
    assert "went away" in out.message
    assert elapsed < 2.0, f"answered {elapsed:.1f} s after the server vanished"


def _refusing_server(context, name: str, received: list[float]) -> Node:
    """An `/oxygen/infer` that refuses every request at once (an inference node still loading its model) and notes
    when each arrived."""
    node = Node(name, context=context)

    def refuse(request: Infer.Request, response: Infer.Response) -> Infer.Response:
        received.append(time.monotonic())
        response.error_code, response.message = "FAILED_PRECONDITION", "node is not active (configuring)"
        return response

    node.create_service(Infer, "/oxygen/infer", refuse)
    return node


def test_a_restarted_server_is_asked_only_once_it_had_time_to_match_the_reply_reader(ros_context):
    """DDS matches a service's request and reply topics one way at a time: a server that replaced the one a client knew
    may answer before its reply writer has matched the client, and that reply is lost (the call would wait its whole
    infer_timeout_s). The client leaves a replacement SETTLE_S before asking it (the first server it meets, SETTLE_S
    after the client was made or last saw no server)."""
    overrides = [Parameter("infer_timeout_s", value=INFER_TIMEOUT_S), Parameter("service_wait_s", value=5.0)]
    vqa = VqaNode(context=ros_context, parameter_overrides=overrides)
    client = Node("infer_client_settle_test", context=ros_context)
    first, second = [], []
    with spin_nodes(ros_context, vqa, client) as executor:
        ask = client.create_client(AskQuestion, "/vqa/ask")
        assert ask.wait_for_service(timeout_sec=10)
        server = _refusing_server(ros_context, "loading_inference", first)
        executor.add_node(server)
        out = wait_for(ask.call_async(AskQuestion.Request(question="Is the path ahead clear?")), INFER_TIMEOUT_S)
        assert (out.error_code, len(first)) == ("FAILED_PRECONDITION", 1), out.message
        executor.remove_node(server)
        server.destroy_node()
        time.sleep(1.0)  # discovery drops the destroyed server (its endpoints are announced gone)
        successor = _refusing_server(ros_context, "restarted_inference", second)
        appeared = time.monotonic()
        executor.add_node(successor)
        out = wait_for(ask.call_async(AskQuestion.Request(question="Is the path ahead clear?")), INFER_TIMEOUT_S)
        executor.remove_node(successor)
        successor.destroy_node()
    assert (out.error_code, len(second)) == ("FAILED_PRECONDITION", 1), out.message
    assert second[0] - appeared >= SETTLE_S, f"asked {second[0] - appeared:.2f} s after the replacement appeared"


def test_a_call_whose_goal_is_cancelled_asks_nothing_more_and_answers_cancelled(ros_context):
    """``cancelled()`` true before the request goes out: nothing reaches `/oxygen/infer`; turning true while a
    server that never answers holds the request: the call gives up within moments, CANCELLED, not after
    infer_timeout_s (a VQA goal cancelled before its question reached the inference node, whose own cancel found
    nothing to cancel there)."""
    client = Node("infer_client_cancel_test", context=ros_context)
    received = threading.Event()
    server = _silent_server(ros_context, received)
    with spin_nodes(ros_context, client, server) as executor:
        infer = InferClient(client, ReentrantCallbackGroup(), wait_s=5.0, timeout_s=INFER_TIMEOUT_S)
        request = lambda: Infer.Request(task_id="t", prompt="Is the path ahead clear?", want_text=True)  # noqa: E731
        first = wait_for(executor.create_task(infer.call(request(), cancelled=lambda: True)), 10.0)
        assert (first.error_code, first.message) == ("CANCELLED", "cancelled before it was asked")
        assert not received.is_set()
        cancel = threading.Event()
        asked = executor.create_task(infer.call(request(), cancelled=cancel.is_set))
        assert received.wait(10), "the question reached /oxygen/infer"
        cancel.set()
        start = time.monotonic()
        second = wait_for(asked, INFER_TIMEOUT_S)
        elapsed = time.monotonic() - start
        infer.destroy()
    assert (second.error_code, second.message) == ("CANCELLED", "cancelled while it was answered")
    assert elapsed < 2.0, f"answered {elapsed:.1f} s after the cancel"


def test_a_request_with_a_deadline_of_its_own_is_waited_for_that_long_and_a_second_more(ros_context):
    """An action chunk's request (deadline_s 0.3 s) to an inference node that takes it and never answers (a hung
    device, a lost reply): DEADLINE_EXCEEDED about ANSWER_SLACK_S after its deadline, not after infer_timeout_s
    (the inference node answers at the deadline itself when it can), so the arm's goal counts the miss and asks
    again instead of standing for infer_timeout_s per chunk."""
    client = Node("infer_client_deadline_test", context=ros_context)
    received = threading.Event()
    server = _silent_server(ros_context, received)
    with spin_nodes(ros_context, client, server) as executor:
        infer = InferClient(client, ReentrantCallbackGroup(), wait_s=5.0, timeout_s=INFER_TIMEOUT_S)
        asked = executor.create_task(infer.call(Infer.Request(task_id="arm", want_actions=True, deadline_s=0.3)))
        assert received.wait(10), "the request reached /oxygen/infer"
        start = time.monotonic()
        out = wait_for(asked, INFER_TIMEOUT_S)
        elapsed = time.monotonic() - start
        infer.destroy()
    assert out.error_code == "DEADLINE_EXCEEDED", out.message
    assert out.message.endswith(f"did not answer within {0.3 + ANSWER_SLACK_S:g} s"), out.message
    assert elapsed < 0.3 + ANSWER_SLACK_S + 0.5, f"answered {elapsed:.1f} s after the request reached the server"
