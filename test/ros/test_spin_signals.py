"""A node executable stopped by Ctrl-C or SIGTERM (the supervisor's, the kernel's when the supervisor dies) can still
send on its way out: rclpy's own handlers would shut the context down before the node is destroyed, and a base
without a cmd_vel timeout would keep the last velocity. Here a node process whose destroy_node publishes one message
(as navigation_node's last zero Twist; first waiting for the listener to be matched, since discovery may trail the
service the test waits for) is signalled; the message arrives and the process exits 0. One whose stop hangs logs
every thread's stack first."""

import signal
import textwrap
import time

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


HANGING = textwrap.dedent('''
    import sys
    import time

    from rclpy.node import Node

    from oxygen_ros.nodes import spin
    from oxygen_ros.nodes.executor import Executor
    from oxygen_ros.srv import CancelTask


    class Hanging(Node):
        def __init__(self):
            super().__init__("hanging")
            self.create_service(CancelTask, "/hanging_ready", lambda request, response: response)

        def destroy_node(self):
            while True:  # a release that never returns (a driver's blocking call, a lock never given back)
                time.sleep(0.1)


    spin.STACKS_AFTER_S = 1.0  # (9.5 s: a goal ending may take 9)
    spin.init(sys.argv[1:])
    sys.exit(spin.spin_until_shutdown(Hanging(), Executor()))
''')


def test_a_stop_that_hangs_logs_where_before_it_is_killed(ros_context, tmp_path):
    """A node whose stop hangs is killed in the end (the supervisor's SIGKILL 30 s on, ros2 launch's sooner); before
    that its log shows every thread's stack, the hanging call among them."""
    script = tmp_path / "hanging.py"
    script.write_text(HANGING)
    with node_process([str(script)], ros_context, CancelTask, "/hanging_ready") as node:
        node.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 15.0
        while "in destroy_node" not in node.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert node.process.poll() is None  # still hanging: the stacks came first
        log = node.log()
        assert "most recent call first" in log and 'hanging.py", line' in log and "in destroy_node" in log, log
        assert "in spin_until_shutdown" in log
        node.process.kill()  # as the supervisor would (a second SIGINT is ignored while a stop runs)
        node.process.wait()
