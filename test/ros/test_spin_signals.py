"""A node executable stopped by Ctrl-C or SIGTERM (the supervisor's, the kernel's when the supervisor dies) can still
send on its way out: rclpy's own handlers would shut the context down before the node is destroyed, and a base
without a cmd_vel timeout would keep the last velocity. Here a node process whose destroy_node publishes one message
(as navigation_node's last zero Twist; first waiting for the listener to be matched, since discovery may trail the
service the test waits for) is signalled; the message arrives and the process exits 0."""

import signal
import textwrap

import pytest
from inference_client import Capture
from rclpy.node import Node
from ros_harness import node_process, spin_nodes
from std_msgs.msg import String

from oxygen_ros.srv import CancelTask

PARTING = textwrap.dedent('''
    import sys
    import time

    from rclpy.duration import Duration
    from rclpy.node import Node
    from std_msgs.msg import String

    from oxygen_ros.nodes.executor import Executor
    from oxygen_ros.nodes.spin import init, spin_until_shutdown
    from oxygen_ros.srv import CancelTask


    class Parting(Node):
        def __init__(self):
            super().__init__("parting")
            self.said = self.create_publisher(String, "/parting", 10)
            self.create_service(CancelTask, "/parting_ready", lambda request, response: response)

        def destroy_node(self):
            deadline = time.monotonic() + 5.0  # the listener matched (discovery may trail the ready service)
            while not self.said.get_subscription_count() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.said.publish(String(data="stopping the robot"))
            self.said.wait_for_all_acked(Duration(seconds=2.0))
            super().destroy_node()


    init(sys.argv[1:])
    sys.exit(spin_until_shutdown(Parting(), Executor()))
''')


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_node_still_sends_on_its_way_out(ros_context, tmp_path, signum):
    script = tmp_path / "parting.py"
    script.write_text(PARTING)
    listener = Node("parting_listener", context=ros_context)
    said = Capture(listener, String, "/parting")
    with spin_nodes(ros_context, listener), node_process([str(script)], ros_context, CancelTask,
                                                         "/parting_ready") as node:  # fmt: skip
        node.process.send_signal(signum)
        assert node.process.wait(timeout=15.0) == 0, node.log()
        said.wait_for(lambda msg: msg.data == "stopping the robot", 5.0, "the node's last message")
