"""destroy_node leaves no action client or server alive. rclpy's destroy_node does not destroy them, and a node handle
they still use is then freed by the garbage collector, later, in whatever test runs then: a clean-clone CI run hung
there for good, in Fast DDS's participant teardown called from the collector after the context was shut down."""

import pytest

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
