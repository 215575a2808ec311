"""The task nodes' executables (`ros2 run oxygen_ros vqa_node` ...) refuse a bad parameter at start: exit status 1
and a log line naming it, instead of spinning with a value that would break every goal."""

import pytest

from oxygen_ros.nodes import instruction_node, navigation_node, vqa_node


@pytest.mark.parametrize(
    "main, parameter",
    [
        (vqa_node.main, "infer_timeout_s:=-1.0"),
        (instruction_node.main, "max_rate_hz:=0.0"),
        (navigation_node.main, "replan_rate_hz:=-5.0"),
    ],
)
def test_bad_parameter_exits_with_the_reason(ros_domain_id, capfd, main, parameter):
    assert main(["--ros-args", "-p", parameter]) == 1
    name = parameter.split(":=")[0]
    assert f"parameter {name} must be a positive number" in capfd.readouterr().err
