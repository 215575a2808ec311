"""Nodes in another process: found through DDS discovery on this session's domain, served across processes."""

import re
from pathlib import Path

from action_msgs.msg import GoalStatus
from rclpy.node import Node
from ros_harness import call_service, clean_fastdds_shm, node_process, send_goal, spin_nodes

from oxygen_ros.action import FollowInstruction
from oxygen_ros.srv import Infer

ECHO_SERVERS = Path(__file__).parents[1] / "echo_servers.py"


def test_round_trip_with_node_process(ros_context):
    with node_process([str(ECHO_SERVERS)], ros_context, Infer, "/oxygen/infer") as server:
        node = Node("subprocess_test_client", context=ros_context)
        with spin_nodes(ros_context, node):
            request = Infer.Request(task_id="p1", task_type="generic", prompt="hello there", want_text=True)
            response = call_service(node, Infer, "/oxygen/infer", request)
            assert (response.success, response.text) == (True, "echo: hello there")

            goal = FollowInstruction.Goal(instruction="nod", rate_hz=20.0, duration_s=0.2)
            run = send_goal(node, FollowInstruction, "/follow_instruction", goal)
            assert run.result().status == GoalStatus.STATUS_SUCCEEDED
            run.wait_feedback(2)
    assert server.process.returncode == 0, server.log()


def _zombies(report: str) -> int:
    return sum(int(n) for n in re.findall(r"^(\d+) zombie (?:ports|segments) cleaned", report, re.MULTILINE))


def test_sigkill_leaves_shared_memory_that_clean_removes(ros_context):
    with node_process([str(ECHO_SERVERS)], ros_context, Infer, "/oxygen/infer") as server:
        server.process.kill()
        server.process.wait()
        assert _zombies(clean_fastdds_shm()) > 0


def test_node_process_cleans_up_after_sigkill(ros_context):
    with node_process([str(ECHO_SERVERS)], ros_context, Infer, "/oxygen/infer") as server:
        server.process.kill()
        server.process.wait()
    assert _zombies(clean_fastdds_shm()) == 0
