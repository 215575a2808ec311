"""The synthetic scene and its renderer: deterministic from the seed, plausible layouts, the camera model inverts."""

import math

import numpy as np
import pytest

from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.palette import OBJECT_COLOURS, ROBOT_BODY, hue
from oxygen_ros.perception.render import render
from oxygen_ros.perception.scene import SHAPES, make_scene

SEEDS = range(40)


def test_same_seed_same_scene_and_frames():
    camera = CameraModel()
    assert make_scene(7) == make_scene(7)
    assert np.array_equal(render(make_scene(7), 1.5, camera), render(make_scene(7), 1.5, camera))
    assert make_scene(7) != make_scene(8)


@pytest.mark.parametrize("seed", SEEDS)
def test_layout_is_valid(seed):
    scene = make_scene(seed)
    table = scene.table
    assert 3 <= len(scene.objects) <= 6
    assert len({o.colour for o in scene.objects}) == len(scene.objects)
    for i, obj in enumerate(scene.objects):
        assert obj.shape in SHAPES and obj.colour in OBJECT_COLOURS
        r = obj.size_cm / 2
        assert table.x0 + r <= obj.x_cm <= table.x1 - r and table.y0 + r <= obj.y_cm <= table.y1 - r
        for other in scene.objects[i + 1 :]:
            assert math.hypot(obj.x_cm - other.x_cm, obj.y_cm - other.y_cm) > (obj.size_cm + other.size_cm) / 2
    assert scene.robot.y_cm < table.y0 and scene.obstacle.y_cm < table.y0


def test_obstacle_walks_back_and_forth_within_its_range():
    obstacle = make_scene(3).obstacle
    times = np.linspace(0.0, 60.0, 601)
    xs = np.array([obstacle.position(t)[0] for t in times])
    assert xs.min() >= obstacle.x_min and xs.max() <= obstacle.x_max
    assert xs.max() - xs.min() > 0.9 * (obstacle.x_max - obstacle.x_min)  # it crosses the room in a minute
    for t in times:  # the velocity is the position's derivative
        step = obstacle.position(t + 1e-3)[0] - obstacle.position(t)[0]
        assert step == pytest.approx(obstacle.velocity(t)[0] * 1e-3)


def test_robot_relative_frame():
    robot = make_scene(0).robot
    ahead, left = robot.relative(robot.x_cm + 100 * math.cos(robot.yaw_rad), robot.y_cm + 100 * math.sin(robot.yaw_rad))
    assert (ahead, left) == pytest.approx((100.0, 0.0), abs=1e-9)
    left_point = (robot.x_cm - 50 * math.sin(robot.yaw_rad), robot.y_cm + 50 * math.cos(robot.yaw_rad))
    assert robot.relative(*left_point) == pytest.approx((0.0, 50.0), abs=1e-9)


@pytest.mark.parametrize("size", [(640, 480), (320, 240), (800, 450)])
def test_camera_round_trip_and_frame_size(size):
    camera = CameraModel(*size)
    for x, y in [(0.0, 0.0), (160.0, 120.0), (320.0, 240.0), (12.5, 200.0)]:
        assert camera.to_room(*camera.to_pixel(x, y)) == pytest.approx((x, y))
    u0, v0 = camera.to_pixel(0.0, 240.0)
    u1, v1 = camera.to_pixel(320.0, 0.0)
    assert 0 <= u0 < u1 <= size[0] and 0 <= v0 < v1 <= size[1]  # the whole room is in view
    frame = render(make_scene(1), 0.0, camera)
    assert frame.shape == (size[1], size[0], 3) and frame.dtype == np.uint8


def test_camera_rejects_tiny_images():
    with pytest.raises(ValueError, match="at least 64x48"):
        CameraModel(32, 24)


def test_each_object_is_drawn_in_its_colour():
    scene = make_scene(5)
    camera = CameraModel()
    frame = render(scene, 0.0, camera, noise=0)
    for obj in scene.objects:
        u, v = camera.to_pixel(obj.x_cm, obj.y_cm)
        assert tuple(frame[round(v), round(u)]) == OBJECT_COLOURS[obj.colour]


def test_palette_hues_are_distinct():
    hues = [hue(rgb) for rgb in [*OBJECT_COLOURS.values(), ROBOT_BODY]]
    gaps = [min(abs(a - b), 180 - abs(a - b)) for i, a in enumerate(hues) for b in hues[i + 1 :]]
    assert min(gaps) >= 13
