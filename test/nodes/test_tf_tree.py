"""oxygen_ros.nodes.tf's buffer without ROS: chained lookups through a common parent, static + dynamic edges,
interpolation and the time tolerance, tf2's input rules (refused transforms say why) and its bounds."""

import math

import pytest
from geometry_msgs.msg import TransformStamped

from oxygen_ros.nodes.tf import tree as tree_module
from oxygen_ros.nodes.tf.rigid import Rigid, interpolate, planar, unit_rotation
from oxygen_ros.nodes.tf.tree import NS, TransformTree, TransformUnavailable


def transform(parent: str, child: str, rigid: Rigid, t: float = 0.0) -> TransformStamped:
    out = TransformStamped(child_frame_id=child, transform=rigid.to_msg())
    out.header.frame_id = parent
    out.header.stamp.sec, out.header.stamp.nanosec = divmod(round(t * NS), NS)
    return out


def close(a: tuple, b: tuple, tol: float = 1e-9) -> bool:
    return all(math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b))


def test_rigid_algebra():
    a, b = planar(1.0, 2.0, 0.5, z=0.3), Rigid((0.1, -0.2, 0.4), (0.2, -0.1, 0.3, math.sqrt(1 - 0.14)))
    point = (0.7, -1.1, 2.0)
    assert close((a * b).apply(point), a.apply(b.apply(point)))
    assert close((a * a.inverse()).apply(point), point)
    assert math.isclose(planar(0, 0, 2.5).yaw, 2.5)
    half = interpolate(planar(0, 0, 0.0), planar(2.0, 0, 1.0), 0.5)
    assert close(half.translation, (1.0, 0.0, 0.0)) and math.isclose(half.yaw, 0.5)
    assert math.isclose(interpolate(planar(0, 0, 3.0), planar(0, 0, -3.0), 0.5).yaw % (2 * math.pi), math.pi)


def test_chained_lookup_through_static_and_dynamic_edges():
    tree = TransformTree()
    tree.set(transform("map", "odom", planar(2.0, -1.0, math.pi / 2)), static=True)
    for t in (1.0, 2.0):
        tree.set(transform("odom", "base_link", planar(t, 0.0, 0.0), t), static=False)
    tree.set(transform("base_link", "camera_link", Rigid((0.1, 0.0, 0.3))), static=True)
    rigid, when = tree.lookup("map", "camera_link")  # latest: the dynamic edge's newest time
    assert when == 2 * NS and close(rigid.apply((0.0, 0.0, 0.0)), (2.0, 1.0 + 0.1, 0.3))
    rigid, _ = tree.lookup("map", "base_link", int(1.5 * NS))  # interpolated
    assert close(rigid.apply((0.0, 0.0, 0.0)), (2.0, 0.5, 0.0))
    back, _ = tree.lookup("camera_link", "map")
    assert close(back.apply(rigid.apply((0.0, 0.0, 0.0))), (-0.6, 0.0, -0.3))  # via the common parent
    assert tree.lookup("/odom", "odom")[0] == Rigid()
    assert TransformTree().lookup("odom", "odom", 5) == (Rigid(), 5)  # as tf2: itself, even before any transform


def test_time_tolerance_and_extrapolation():
    tree = TransformTree(tolerance_s=0.2)
    tree.set(transform("odom", "base_link", planar(1.0, 0, 0), 1.0), static=False)
    tree.set(transform("odom", "base_link", planar(2.0, 0, 0), 2.0), static=False)
    assert close(tree.lookup("odom", "base_link", int(2.1 * NS))[0].translation, (2.0, 0.0, 0.0))
    with pytest.raises(TransformUnavailable, match="extrapolate"):
        tree.lookup("odom", "base_link", int(2.5 * NS))
    with pytest.raises(TransformUnavailable, match="does not exist"):
        tree.lookup("odom", "wheel")
    tree.set(transform("world", "robot2", Rigid()), static=True)
    with pytest.raises(TransformUnavailable, match="not connected"):
        tree.lookup("odom", "robot2")


@pytest.mark.parametrize(
    "parent, child, rigid, complaint",
    [
        ("", "odom", Rigid(), "frame_id"),
        ("map", "map", Rigid(), "its own parent"),
        ("map", "odom", Rigid((math.nan, 0.0, 0.0)), "non-finite"),
        ("map", "odom", Rigid((2e6, 0.0, 0.0)), "moves more than"),
        ("map", "odom", Rigid(rotation=(0.0, 0.0, 0.0, 0.5)), "non-unit quaternion"),
        ("map", "x" * 300, Rigid(), "child_frame_id"),
    ],
)
def test_bad_transforms_are_refused_with_the_reason(parent, child, rigid, complaint):
    with pytest.raises(ValueError, match=complaint):
        TransformTree().set(transform(parent, child, rigid), static=False)


def test_history_and_frames_are_bounded(monkeypatch):
    monkeypatch.setattr(tree_module, "MAX_FRAMES", 3)
    monkeypatch.setattr(tree_module, "MAX_SAMPLES", 5)
    tree = TransformTree()
    for i in range(20):  # within CACHE_S, so only MAX_SAMPLES bounds it
        tree.set(transform("odom", "base_link", planar(float(i), 0, 0), i * 0.1), static=False)
    with pytest.raises(TransformUnavailable, match="extrapolate"):
        tree.lookup("odom", "base_link", 0)  # the oldest samples are gone
    for i in range(11, 20):
        tree.set(transform("odom", "base_link", planar(0.0, 0, 0), 100.0 + i), static=False)
    assert tree.lookup("odom", "base_link")[1] == 119 * NS
    tree.set(transform("map", "odom", Rigid()), static=True)
    tree.set(transform("base_link", "camera", Rigid()), static=True)
    with pytest.raises(ValueError, match="3 frames"):
        tree.set(transform("camera", "optical", Rigid()), static=True)
    near_unit = Rigid(rotation=(0.0, 0.0, 0.0, 1.004))  # normalised, as tf2 does
    tree.set(transform("map", "odom", near_unit), static=True)
    assert tree.lookup("map", "odom")[0].rotation == (0.0, 0.0, 0.0, 1.0)


def test_a_pose_of_no_rotation_is_refused_and_a_nearly_unit_one_normalized():
    """Odometry and transforms share the rule: a quaternion of all zeros (a driver's unset pose) or NaN has no yaw
    to steer by; one within 1% of unit length is normalized, so its yaw is read right."""
    for rotation in ((0.0, 0.0, 0.0, 0.0), (0.0, 0.0, math.nan, 1.0), (0.0, 0.0, 0.0, 1.2)):
        with pytest.raises(ValueError, match="the pose has a non-unit quaternion"):
            unit_rotation(Rigid((0.0, 0.0, 0.0), rotation), "the pose")
    half = math.sin(math.pi / 4) * 1.004, math.cos(math.pi / 4) * 1.004  # yaw 90 degrees, 0.4% long
    unit = unit_rotation(Rigid((1.0, 2.0, 0.0), (0.0, 0.0, *half)), "the pose")
    assert math.isclose(sum(v * v for v in unit.rotation), 1.0) and math.isclose(unit.yaw, math.pi / 2)
