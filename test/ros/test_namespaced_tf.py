"""Under namespace:=robot1 TF moves with the robot, through real rclpy nodes: camera_sim (the simulator's TF
broadcaster) and the navigation node (a TF listener), started with the remappings the launch file gives each of them
(read from the launch file itself, evaluated with namespace:=robot1), publish and read /robot1/tf and
/robot1/tf_static, and nothing of theirs is left on the root's /tf or /tf_static, where another robot's TF is."""

import sys
from pathlib import Path

import launch_stand_ins
import pytest
from rclpy.node import Node
from ros_harness import make_context, spin_nodes, wait_until
from tf2_msgs.msg import TFMessage

from oxygen_ros.nodes.camera_sim import CameraSim
from oxygen_ros.nodes.navigation_node import NavigationNode
from oxygen_ros.nodes.tf.topics import STATIC_LISTENER_QOS

SHARE = Path(sys.prefix) / "share" / "oxygen_ros"  # what `make install` put into the venv
NAMESPACE = "robot1"


@pytest.fixture
def remap_arguments(monkeypatch):
    """Each node's command-line remappings as the launch file sets them under namespace:=robot1."""
    launch_stand_ins.install(monkeypatch, SHARE)
    nodes = launch_stand_ins.evaluate(use_sim="true", namespace=NAMESPACE).nodes()
    return {name: ["--ros-args", *(arg for old, new in node.remappings for arg in ("-r", f"{old}:={new}"))]
            for name, node in nodes.items()}  # fmt: skip


def test_a_namespaced_robots_tf_is_its_own(ros_domain_id, remap_arguments):
    context = make_context(ros_domain_id)
    camera = CameraSim(context=context, namespace=NAMESPACE, cli_args=remap_arguments["camera_sim"])
    navigation = NavigationNode(context=context, namespace=NAMESPACE, cli_args=remap_arguments["navigation_node"])
    probe = Node("tf_probe", context=context)
    static: list[TFMessage] = []
    probe.create_subscription(TFMessage, f"/{NAMESPACE}/tf_static", static.append, STATIC_LISTENER_QOS)
    try:
        with spin_nodes(context, camera, navigation, probe):
            wait_until(lambda: static, 10.0, f"camera_sim's static transforms on /{NAMESPACE}/tf_static")
            assert {t.child_frame_id for msg in static for t in msg.transforms}, static
            for topic in ("tf", "tf_static"):
                publishers = {i.node_name for i in probe.get_publishers_info_by_topic(f"/{NAMESPACE}/{topic}")}
                readers = {i.node_name for i in probe.get_subscriptions_info_by_topic(f"/{NAMESPACE}/{topic}")}
                assert camera.get_name() in publishers, (topic, publishers)  # camera_sim's broadcasters
                assert navigation.get_name() in readers, (topic, readers)  # the navigation node's listener
                assert probe.count_publishers(f"/{topic}") == 0, topic
                assert probe.count_subscribers(f"/{topic}") == 0, topic
    finally:
        context.try_shutdown()
