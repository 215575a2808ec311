"""A burst of more concurrent calls than the ROS default queue (10) is answered in full: 40 questions to `/vqa/ask`
(its `/oxygen/infer` a stub) and 40 goals to `/follow_instruction`. With the default depth DDS dropped all but 10
silently and their callers waited forever (found by the fuzz suite); see oxygen_ros/nodes/qos.py."""

from oxygen_ros.action import FollowInstruction
from oxygen_ros.srv import AskQuestion, Infer
from rclpy.node import Node
from ros_harness import spin_nodes, wait_until

from oxygen_ros.nodes.action_client import ActionClient
from oxygen_ros.nodes.instruction_node import InstructionNode
from oxygen_ros.nodes.qos import SERVICE_QUEUE
from oxygen_ros.nodes.vqa_node import VqaNode

BURST = 40


def _stub_inference(context) -> Node:
    node = Node("stub_inference", context=context)

    def answer(request: Infer.Request, response: Infer.Response) -> Infer.Response:
        response.success, response.text = True, "a cup"
        return response

    node.create_service(Infer, "/oxygen/infer", answer, qos_profile=SERVICE_QUEUE)
    return node


def test_a_burst_of_questions_is_answered_in_full(ros_context):
    client = Node("burst_client", context=ros_context)
    with spin_nodes(ros_context, _stub_inference(ros_context), VqaNode(context=ros_context), client):
        ask = client.create_client(AskQuestion, "/vqa/ask", qos_profile=SERVICE_QUEUE)
        assert ask.wait_for_service(timeout_sec=10)
        futures = [ask.call_async(AskQuestion.Request(question=f"question {i}?")) for i in range(BURST)]
        wait_until(lambda: all(f.done() for f in futures), 30, f"answers to all {BURST} questions")
    assert all(f.result().success for f in futures), {f.result().error_code for f in futures}


def test_a_burst_of_goals_is_answered_in_full(ros_context):
    client = Node("burst_client", context=ros_context)
    actions = ActionClient(client, FollowInstruction, "/follow_instruction", goal_service_qos_profile=SERVICE_QUEUE,
                           result_service_qos_profile=SERVICE_QUEUE)  # fmt: skip
    with spin_nodes(ros_context, InstructionNode(context=ros_context), client):
        assert actions.wait_for_server(timeout_sec=10)
        sent = [actions.send_goal_async(FollowInstruction.Goal(instruction="")) for _ in range(BURST)]
        wait_until(lambda: all(f.done() for f in sent), 30, f"responses to all {BURST} goals")
        results = [f.result().get_result_async() for f in sent]
        wait_until(lambda: all(r.done() for r in results), 30, f"results of all {BURST} goals")
    assert {r.result().result.error_code for r in results} == {"INVALID_ARGUMENT"}
