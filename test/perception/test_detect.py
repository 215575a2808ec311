"""The detector reads rendered frames (never the scene's truth) and is graded against that truth."""

import dataclasses
import math

import numpy as np
import pytest
from perception_helpers import obstacle_truth, time_obstacle_at, x_straight_ahead

from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.detect import detect
from oxygen_ros.perception.render import ROBOT_RADIUS_CM, render
from oxygen_ros.perception.scene import RobotPose, SceneObject, make_scene

SEEDS = range(20)


@pytest.mark.parametrize("camera, tol_cm", [(CameraModel(640, 480), 1.5), (CameraModel(320, 240), 2.5)])
@pytest.mark.parametrize("seed", SEEDS)
def test_objects_robot_and_obstacle_match_the_truth(seed, camera, tol_cm):
    scene = make_scene(seed)
    t = 0.37 * seed
    found = detect(render(scene, t, camera), camera)

    assert sorted((o.colour, o.shape) for o in found.objects) == sorted((o.colour, o.shape) for o in scene.objects)
    truth = {o.colour: o for o in scene.objects}
    for obj in found.objects:
        true = truth[obj.colour]
        assert math.hypot(obj.x_cm - true.x_cm, obj.y_cm - true.y_cm) < tol_cm
        assert obj.size_cm == pytest.approx(true.size_cm, abs=2 * tol_cm)
        ahead, left = scene.robot.relative(true.x_cm, true.y_cm)
        assert (obj.ahead_cm, obj.left_cm) == pytest.approx((ahead, left), abs=2 * tol_cm)
    assert [o.distance_cm for o in found.objects] == sorted(o.distance_cm for o in found.objects)

    robot = found.robot
    assert robot is not None
    assert math.hypot(robot.pose.x_cm - scene.robot.x_cm, robot.pose.y_cm - scene.robot.y_cm) < tol_cm
    assert abs(robot.pose.yaw_rad - scene.robot.yaw_rad) < math.radians(6)
    assert robot.radius_cm == pytest.approx(ROBOT_RADIUS_CM, abs=tol_cm)

    (obstacle,) = found.obstacles
    ox, oy = scene.obstacle.position(t)
    assert math.hypot(obstacle.x_cm - ox, obstacle.y_cm - oy) < tol_cm
    assert obstacle.radius_cm == pytest.approx(scene.obstacle.radius_cm, abs=tol_cm)
    ahead, left, _ = obstacle_truth(scene, t)
    assert obstacle.distance_cm == pytest.approx(math.hypot(ahead, left), abs=2 * tol_cm)
    gap = math.hypot(ahead, left) - scene.obstacle.radius_cm - ROBOT_RADIUS_CM
    assert obstacle.clearance_cm == pytest.approx(gap, abs=3 * tol_cm)


@pytest.mark.parametrize("seed", range(5))
def test_obstacle_straight_ahead_is_in_front_with_the_true_distance(seed):
    scene = make_scene(seed)
    t = time_obstacle_at(scene.obstacle, x_straight_ahead(scene.robot, scene.obstacle.y_cm))
    (obstacle,) = detect(render(scene, t, CameraModel())).obstacles
    ahead, left, _ = obstacle_truth(scene, t)
    assert abs(left) < 0.5 and abs(obstacle.left_cm) < 2.0
    assert obstacle.ahead_cm == pytest.approx(ahead, abs=2.0)


@pytest.mark.parametrize("shape", ["circle", "square", "triangle", "star"])
@pytest.mark.parametrize("size_cm", [12.0, 20.0])
def test_shape_classifier_at_every_rotation(shape, size_cm):
    camera = CameraModel()
    for rotation in range(0, 360, 11):
        obj = SceneObject("red", shape, 100.0, 100.0, size_cm, float(rotation))
        scene = dataclasses.replace(make_scene(0), objects=(obj,))
        (found,) = detect(render(scene, 0.0, camera), camera).objects
        assert found.shape == shape, rotation


def test_no_robot_in_view_gives_room_positions_only():
    scene = dataclasses.replace(make_scene(2), robot=RobotPose(-500.0, -500.0, 0.0))
    found = detect(render(scene, 0.0, CameraModel()))
    assert found.robot is None
    assert len(found.objects) == len(scene.objects)
    assert all(o.ahead_cm is None and o.distance_cm is None for o in found.objects)
    assert found.obstacles[0].clearance_cm is None
    assert [o.y_cm for o in found.objects] == sorted((o.y_cm for o in found.objects), reverse=True)


def test_empty_floor_has_no_detections():
    frame = np.full((480, 640, 3), 150, np.uint8)
    found = detect(frame)
    assert (found.objects, found.obstacles, found.robot) == ([], [], None)


@pytest.mark.parametrize("bad", [np.zeros((48, 64), np.uint8), np.zeros((48, 64, 3), np.float32)])
def test_rejects_frames_that_are_not_rgb8(bad):
    with pytest.raises(ValueError, match="HxWx3 uint8"):
        detect(bad)
