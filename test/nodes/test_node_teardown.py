"""destroy_node leaves no action client or server alive. rclpy's destroy_node does not destroy them, and a node handle
they still use is then freed by the garbage collector, later, in whatever test runs then: a clean-clone CI run hung
there for good, in Fast DDS's participant teardown called from the collector after the context was shut down."""

import pytest
from oxygen_ros.action import FollowInstruction, Navigate
from rclpy.action import ActionClient as RclpyActionClient
from rclpy.action import ActionServer
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node

from oxygen_ros.nodes import teardown
from oxygen_ros.nodes.action_client import ActionClient
from oxygen_ros.nodes.inference_node import InferenceNode
from oxygen_ros.nodes.instruction_node import InstructionNode
from oxygen_ros.nodes.navigation_node import NavigationNode
from oxygen_ros.nodes.vqa_node import VqaNode


@pytest.mark.parametrize("node_class", [InferenceNode, VqaNode, InstructionNode, NavigationNode])
def test_destroy_node_destroys_every_action_client_and_server(ros_context, node_class):
    node = node_class(context=ros_context)
    assert list(node.waitables)  # each has an action server or client of /oxygen/generate
    node.destroy_node()
    assert [type(w).__name__ for w in node.waitables] == []


def test_the_teardown_helper_destroys_the_action_clients_and_servers_of_a_plain_node(ros_context):
    """What the demo's client node (bringup.Graph.close), the CLI's and the tests' harnesses rely on."""
    node = Node("teardown_probe", context=ros_context)
    clients = [ActionClient(node, FollowInstruction, "/follow_instruction"), RclpyActionClient(node, Navigate, "/nav")]
    server = ActionServer(node, Navigate, "/nav", execute_callback=lambda goal: Navigate.Result())
    teardown.destroy_node(node)
    assert list(node.waitables) == []
    for entity in (*(client._client_handle for client in clients), server._handle):
        with pytest.raises(InvalidHandle):  # destroyed now, not left to the garbage collector
            with entity:
                pass


def test_a_project_node_is_torn_down_once_by_the_helper(ros_context):
    node = InferenceNode(context=ros_context)
    teardown.destroy_node(node)  # its own destroy_node destroyed its server: not destroyed twice
    assert list(node.waitables) == []
