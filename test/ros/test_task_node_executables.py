"""The task nodes' executables (`ros2 run oxygen_ros vqa_node` ...) refuse a bad parameter at start, with a log line
naming it, instead of spinning with a value that would break every goal: under `ros2 launch` (whose respawn ignores
the exit status) the process stays up serving nothing, the reason on /diagnostics, until stopped; with
``--exit-on-refusal`` (`oxygen-ros up`'s restart policy) it exits 1 at once."""

import signal
import threading

import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from inference_client import Capture
from rclpy.node import Node
from ros_harness import spin_nodes

from oxygen_ros.nodes import instruction_node, navigation_node, vqa_node
from oxygen_ros.nodes.spin import EXIT_ON_REFUSAL


@pytest.mark.parametrize(
    "main, parameter, reason",
    [
        (vqa_node.main, "infer_timeout_s:=-1.0", "out of range"),  # refused by the parameter's declared range
        (instruction_node.main, "max_rate_hz:=0.0", "must be a positive number"),  # in range, refused by the node
        (navigation_node.main, "replan_rate_hz:=-5.0", "out of range"),
        (navigation_node.main, "nav2:=sometimes", "must be one of auto, always, never"),
        (navigation_node.main, "odom_frame:=map", "two different frame ids"),
    ],
)
def test_bad_parameter_exits_with_the_reason(ros_domain_id, capfd, main, parameter, reason):
    assert main([EXIT_ON_REFUSAL, "--ros-args", "-p", parameter]) == 1
    name = parameter.split(":=")[0]
    err = capfd.readouterr().err
    assert name in err and reason in err, err


@pytest.fixture
def pytests_signals():
    """main's spin leaves SIGINT and SIGTERM ignored on its way out (as a node process ending): pytest's come back,
    or the node processes of later tests would start with them ignored."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_bad_parameter_without_the_flag_stays_up_refusing_on_diagnostics(ros_context, capfd, pytests_signals):
    listener = Node("refusal_listener", context=ros_context)
    diagnostics = Capture(listener, DiagnosticArray, "/diagnostics")
    seen: dict = {}

    def watch() -> None:
        try:
            msg = diagnostics.wait_for(lambda m: any(s.name == "robot1/navigation_node: parameters" for s in m.status),
                                       timeout=30.0, what="the refusal's ERROR")  # fmt: skip
            seen["status"] = msg.status[0]
            seen["nodes"] = listener.get_node_names_and_namespaces()
            seen["second"] = diagnostics.wait_for(lambda m: m is not msg and m.status[0].name == msg.status[0].name,
                                                  timeout=5.0, what="a second report")  # fmt: skip
        finally:
            rclpy.try_shutdown()  # the node executable's context: its main returns

    with spin_nodes(ros_context, listener):
        watcher = threading.Thread(target=watch)
        watcher.start()
        code = navigation_node.main(["--ros-args", "-r", "__ns:=/robot1", "-p", "replan_rate_hz:=-5.0"])
        watcher.join()
    assert code == 1
    status = seen["status"]
    assert status.level == DiagnosticStatus.ERROR and "replan_rate_hz" in status.message, status
    assert seen["nodes"].count(("navigation_node", "/robot1")) == 1, seen["nodes"]  # not the half-built one as well
    assert "second" in seen  # reported every second, for a monitor that started later
    assert "replan_rate_hz" in capfd.readouterr().err
