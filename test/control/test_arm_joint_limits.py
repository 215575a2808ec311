"""Joint limits read from a URDF by urdf_parser_py and tightened, never widened, by parameters."""

import math

import pytest

from oxygen_ros.control.arm.joint_limits import JointLimit, joint_limits, urdf_limits
from oxygen_ros.errors import EngineError, ErrorCode

URDF = """<?xml version="1.0" encoding="utf-8"?>
<robot name="arm">
  <link name="base"/><link name="l1"/><link name="l2"/><link name="l3"/><link name="l4"/><link name="l5"/>
  <joint name="pan" type="revolute"><parent link="base"/><child link="l1"/>
    <limit lower="-1.9" upper="1.9" velocity="2.0" effort="5"/></joint>
  <joint name="roll" type="continuous"><parent link="l1"/><child link="l2"/>
    <limit velocity="3.0" effort="5"/></joint>
  <joint name="slide" type="prismatic"><parent link="l2"/><child link="l3"/>
    <limit lower="0.0" upper="0.04" velocity="0.1" effort="20"/></joint>
  <joint name="finger" type="prismatic"><parent link="l3"/><child link="l4"/>
    <limit lower="0.0" upper="0.04" velocity="0.1" effort="20"/><mimic joint="slide"/></joint>
  <joint name="tool" type="fixed"><parent link="l4"/><child link="l5"/></joint>
  <ros2_control name="hw" type="system"/>
</robot>
"""


def test_commandable_joints_with_their_limits():
    limits = urdf_limits(URDF)
    assert set(limits) == {"pan", "roll", "slide"}  # the mimic and the fixed joint are never commanded
    assert limits["pan"] == JointLimit(-1.9, 1.9, 2.0)
    assert limits["roll"] == JointLimit(-math.inf, math.inf, 3.0)  # not 0..0: a continuous joint turns freely
    assert limits["slide"] == JointLimit(0.0, 0.04, 0.1)


def test_parameters_only_tighten():
    described = urdf_limits(URDF)
    nan = math.nan
    got = joint_limits(["pan", "roll"], described, [-3.0, nan], [1.0, nan], [5.0, 1.5], [])
    assert got == [JointLimit(-1.9, 1.0, 2.0), JointLimit(-math.inf, math.inf, 1.5)]  # -3 and 5 would widen: ignored


def test_acceleration_limits_come_from_their_parameter_alone():
    """A URDF has no acceleration limit: unchecked (inf) unless joint_acceleration_limits sets one (NaN = none); a
    list of the wrong length, or a limit that is not positive, is refused."""
    described = urdf_limits(URDF)
    got = joint_limits(["pan", "roll"], described, [], [], [], [6.0, math.nan])
    assert got == [JointLimit(-1.9, 1.9, 2.0, 6.0), JointLimit(-math.inf, math.inf, 3.0, math.inf)]
    assert joint_limits(["pan"], described, [], [], [], [])[0].acceleration == math.inf
    with pytest.raises(EngineError, match="joint_acceleration_limits has 1 values for 2 joints"):
        joint_limits(["pan", "roll"], described, [], [], [], [6.0])
    with pytest.raises(EngineError, match="leave no motion"):
        joint_limits(["pan"], described, [], [], [], [0.0])


def test_every_commanded_joint_needs_limits():
    with pytest.raises(EngineError) as err:
        joint_limits(["pan", "elbow"], urdf_limits(URDF), [], [], [], [])
    assert err.value.code == ErrorCode.FAILED_PRECONDITION and "joint elbow" in err.value.message
    assert joint_limits(["elbow"], {}, [-1.0], [1.0], [0.5], []) == [JointLimit(-1.0, 1.0, 0.5)]  # parameters alone
    with pytest.raises(EngineError, match="joint_upper_limits has 1 values for 2 joints"):
        joint_limits(["pan", "roll"], urdf_limits(URDF), [], [1.0], [], [])
    with pytest.raises(EngineError, match="leave no motion"):
        joint_limits(["pan"], urdf_limits(URDF), [1.0], [0.5], [], [])


def test_a_malformed_description_is_refused():
    with pytest.raises(EngineError) as err:
        urdf_limits("<robot name='x'><joint name='a'")
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and "robot_description" in err.value.message


def test_a_description_cannot_pull_in_files(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("leaked")
    hostile = f"""<?xml version="1.0"?>
<!DOCTYPE robot [<!ENTITY x SYSTEM "file://{secret}">]>
<robot name="arm"><link name="a"/><link name="b"/>
  <joint name="j&x;" type="revolute"><parent link="a"/><child link="b"/>
    <limit lower="-1" upper="1" velocity="1" effort="1"/></joint></robot>"""
    try:
        names = set(urdf_limits(hostile))
    except EngineError as exc:
        assert exc.code == ErrorCode.INVALID_ARGUMENT
        names = set()
    assert not any("leaked" in name for name in names)


def test_unbounded_positions_only_for_a_continuous_joint():
    with pytest.raises(EngineError, match="must be finite"):
        joint_limits(["elbow"], {}, [-math.inf], [1.0], [0.5], [])
    assert joint_limits(["roll"], urdf_limits(URDF), [], [], [], [])[0].upper == math.inf
    assert joint_limits(["roll"], urdf_limits(URDF), [-1.0], [1.0], [], [])[0] == JointLimit(-1.0, 1.0, 3.0)
    with pytest.raises(EngineError, match="together or not at all") as raised:  # half bounded: no wrap, no range
        joint_limits(["roll"], urdf_limits(URDF), [-1.0], [math.nan], [], [])
    assert raised.value.code == ErrorCode.FAILED_PRECONDITION


@pytest.mark.parametrize(("safety", "expected"), [
    ('soft_lower_limit="-1.75" soft_upper_limit="1.5"', (-1.75, 1.5)),  # inside: the soft range
    ('soft_lower_limit="-2.5" soft_upper_limit="1.5"', (-1.9, 1.5)),  # one side outside: the hard one there
    ('', (-1.9, 1.9)),  # no soft limits (urdf_parser_py's 0 and 0): the hard ones
    ('soft_lower_limit="-1.0"', (-1.9, 1.9)),  # one alone: nothing
    ('soft_lower_limit="1.95" soft_upper_limit="2.5"', (-1.9, 1.9)),  # no overlap: nothing
])  # fmt: skip
def test_a_safety_controllers_soft_limits_narrow_the_hard_ones(safety, expected):
    """A UR description with safety_limits (0.15 rad inside), a PR2's: the robot's safety acts from the soft
    limits, so a chunk stays within them."""
    urdf = URDF.replace('<limit lower="-1.9" upper="1.9" velocity="2.0" effort="5"/>',
                        '<limit lower="-1.9" upper="1.9" velocity="2.0" effort="5"/>'
                        f'<safety_controller k_position="20" k_velocity="10" {safety}/>')
    assert urdf != URDF
    limits = urdf_limits(urdf)
    assert (limits["pan"].lower, limits["pan"].upper) == expected and limits["slide"] == JointLimit(0.0, 0.04, 0.1)
