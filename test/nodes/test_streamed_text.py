"""A streamed answer stays whole when its result overtakes its last feedback messages: the pieces a task node
passes on add up to the result's text, and a piece arriving after the result is not passed on."""

from oxygen_ros.action import AskQuestion as AskQuestionAction
from oxygen_ros.action import Generate
from oxygen_ros.srv import Infer
from rclpy.action import ActionServer
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_harness import send_goal, spin_nodes

from oxygen_ros.nodes.streamed_text import StreamedText
from oxygen_ros.nodes.vqa_node import VqaNode

ANSWER = " A red cup, left of the robot."


def _collect() -> tuple[list[tuple[str, int]], StreamedText]:
    got: list[tuple[str, int]] = []
    return got, StreamedText(lambda text, tokens: got.append((text, tokens)))


def test_the_tail_the_result_overtook_is_passed_on_and_late_pieces_are_dropped():
    got, stream = _collect()
    stream.piece(" A red", 2)
    stream.finish(ANSWER, 9)
    stream.piece(" cup,", 4)  # feedback that arrived after the result
    assert got == [(" A red", 2), (" cup, left of the robot.", 9)]


def test_a_complete_stream_gets_nothing_more_and_a_stream_that_is_not_a_prefix_no_wrong_tail():
    got, stream = _collect()
    for piece, tokens in ((" A red cup,", 4), (" left of the robot.", 9)):
        stream.piece(piece, tokens)
    stream.finish(ANSWER, 9)
    assert "".join(text for text, _ in got) == ANSWER and len(got) == 2
    got, stream = _collect()
    stream.piece(" A blue", 2)
    stream.finish(ANSWER, 9)
    assert got == [(" A blue", 2)]


def _inference_that_streams_only_the_head(context) -> Node:
    """An inference node whose Generate result carries the whole answer but whose feedback carried only its first
    words (what a client sees when the result overtakes the last feedback messages)."""
    node = Node("head_only_inference", context=context)
    node.create_service(Infer, "/oxygen/infer", lambda request, response: response)  # present: the node is up

    def execute(goal_handle) -> Generate.Result:
        goal_handle.publish_feedback(Generate.Feedback(text=ANSWER[:6], generated_tokens=2))
        goal_handle.succeed()
        return Generate.Result(success=True, text=ANSWER, generated_tokens=9)

    node.server = ActionServer(node, Generate, "/oxygen/generate", execute_callback=execute)
    return node


def test_the_ask_action_streams_the_whole_answer_when_the_result_overtook_the_inference_feedback(ros_context):
    vqa = VqaNode(context=ros_context, parameter_overrides=[Parameter("service_wait_s", value=5.0)])
    inference = _inference_that_streams_only_the_head(ros_context)
    client = Node("streamed_text_test", context=ros_context)
    with spin_nodes(ros_context, vqa, inference, client):
        asked = send_goal(client, AskQuestionAction, "/vqa/ask", AskQuestionAction.Goal(question="Where is the cup?"))
        done = asked.result(30)
        assert done.result.success and done.result.answer == ANSWER.strip(), done.result.message
        assert asked.streamed_text(ANSWER) == ANSWER
        assert [f.generated_tokens for f in asked.feedback] == [2, 9]
        inference.server.destroy()
