"""Two robots' inference nodes, each under its robot's namespace, publish to the one absolute /diagnostics that
diagnostic_aggregator and rqt_robot_monitor read: each status is named by its node's namespace, so one robot's
report never stands in for the other's (a fixed name would make the monitor show whichever arrived last)."""

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from inference_client import Capture
from rclpy.node import Node
from ros_harness import spin_nodes, wait_until

from oxygen_ros.nodes.inference_node import InferenceNode

ROBOTS = ("robot1", "robot2")


def test_two_namespaced_inference_nodes_report_apart_on_one_diagnostics_topic(ros_context):
    nodes = [InferenceNode(context=ros_context, namespace=robot) for robot in ROBOTS]
    client = Node("diagnostics_monitor", context=ros_context)
    diagnostics = Capture(client, DiagnosticArray, "/diagnostics", 50)
    expected = {f"{robot}/oxygen_inference: KV pool" for robot in ROBOTS}
    with spin_nodes(ros_context, *nodes, client):
        wait_until(lambda: expected <= {s.name for m in diagnostics.messages for s in m.status}, 15.0,
                   "both robots' reports")  # fmt: skip
    statuses = [s for m in diagnostics.messages for s in m.status]
    assert {s.name for s in statuses} == expected  # nothing else, and no unprefixed name
    for status in statuses:  # neither node is configured: each says so under its own name
        state = {v.key: v.value for v in status.values}["state"]
        assert (status.level, state) == (DiagnosticStatus.ERROR, "unconfigured"), status
