"""The task nodes' executables (`ros2 run oxygen_ros vqa_node` ...) refuse a bad parameter at start: exit status 1
and a log line naming it, instead of spinning with a value that would break every goal."""

import pytest

from oxygen_ros.nodes import instruction_node, navigation_node, vqa_node


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
    assert main(["--ros-args", "-p", parameter]) == 1
    name = parameter.split(":=")[0]
    err = capfd.readouterr().err
    assert name in err and reason in err, err
