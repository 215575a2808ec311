"""The observation text says what the ground truth says, in the fixed sentence shapes, and stays short."""

import dataclasses
import math
import re

import numpy as np
import pytest
from gguf_files import smollm2_reader
from perception_helpers import obstacle_truth, time_obstacle_at, x_straight_ahead

from oxygen_ros.models.tokenizer import Tokenizer
from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.describe import compass, describe, text
from oxygen_ros.perception.detect import DetectedObstacle
from oxygen_ros.perception.render import render
from oxygen_ros.perception.scene import RobotPose, make_scene

SEEDS = range(12)


def _times(scene) -> dict[str, float]:
    """A moment with the obstacle straight ahead and one with it far to the side."""
    ahead = time_obstacle_at(scene.obstacle, x_straight_ahead(scene.robot, scene.obstacle.y_cm))
    side_x = scene.obstacle.x_min if scene.robot.x_cm > 160 else scene.obstacle.x_max
    return {"blocked": ahead, "clear": time_obstacle_at(scene.obstacle, side_x)}


@pytest.mark.parametrize("moment", ["blocked", "clear"])
@pytest.mark.parametrize("seed", SEEDS)
def test_text_states_the_ground_truth(seed, moment):
    scene = make_scene(seed)
    t = _times(scene)[moment]
    lines = describe(render(scene, t, CameraModel())).text.splitlines()
    robot = scene.robot
    where = {o.colour: robot.relative(o.x_cm, o.y_cm) for o in scene.objects}

    assert lines[0].startswith(f"There are {len(scene.objects)} objects on the table: ")
    for obj in scene.objects:
        (line,) = [line for line in lines if line.startswith(f"The {obj.colour} object is a")]
        name = f"{obj.colour} {obj.shape}"
        pattern = rf"The {obj.colour} object is an? {name}, (\d+) cm wide, (\d+) cm away on the (\w+)\."
        width, away, side = re.fullmatch(pattern, line).groups()
        assert abs(int(width) - obj.size_cm) <= 2
        assert abs(int(away) - math.hypot(*where[obj.colour])) <= 2
        if abs(where[obj.colour][1]) > 2:
            assert side == ("left" if where[obj.colour][1] > 0 else "right")
    closest = min(scene.objects, key=lambda o: math.hypot(*where[o.colour]))
    leftmost = max(scene.objects, key=lambda o: where[o.colour][1])
    assert f"The object closest to the robot is the {closest.colour} {closest.shape}." in lines
    assert f"The object furthest to the left is the {leftmost.colour} {leftmost.shape}." in lines

    ahead, left, blocked = obstacle_truth(scene, t)
    assert blocked == (moment == "blocked")
    (obstacle,) = [line for line in lines if line.startswith("The obstacle is ")]
    assert abs(int(re.search(r"(\d+) cm away", obstacle).group(1)) - math.hypot(ahead, left)) <= 2
    path = "The path ahead is not clear: the obstacle blocks it." if blocked else "The path ahead is clear."
    assert lines[-2:] == [path, f"The robot is facing {compass(robot.yaw_rad)}."]


def test_same_frame_same_text():
    frame = render(make_scene(3), 1.0, CameraModel())
    assert describe(frame).text == describe(frame.copy()).text


def test_short_enough_for_a_small_model():
    """Six objects take about 240 tokens (two thirds of them the six object sentences); three take about 140."""
    tokenizer = Tokenizer.from_gguf_metadata(smollm2_reader())
    lengths = [len(tokenizer.encode(describe(render(make_scene(s), 0.0, CameraModel())).text)) for s in range(30)]
    assert max(lengths) <= 260


def test_without_a_robot_positions_are_in_room_coordinates():
    scene = dataclasses.replace(make_scene(2), robot=RobotPose(-500.0, -500.0, 0.0))
    lines = describe(render(scene, 0.0, CameraModel())).text.splitlines()
    assert lines[-1] == "The robot is not in view."
    assert not any("away" in line or "left" in line or "path" in line for line in lines)
    obj = scene.objects[0]
    (line,) = [line for line in lines if line.startswith(f"The {obj.colour} object")]
    x, y = (int(v) for v in re.search(r"at x (\d+) cm, y (\d+) cm in the room", line).groups())
    assert abs(x - obj.x_cm) <= 2 and abs(y - obj.y_cm) <= 2


def test_empty_and_crowded_floors():
    assert describe(np.full((480, 640, 3), 150, np.uint8)).text == (
        "There are no objects on the table.\nThere is no obstacle.\nThe robot is not in view."
    )
    found = describe(render(make_scene(1), 0.0, CameraModel())).detections
    near = DetectedObstacle(0.0, 0.0, 10.0, 50.0, 0.0, 15.0)
    far = DetectedObstacle(0.0, 0.0, 10.0, 200.0, 90.0, 160.0)
    lines = text(dataclasses.replace(found, objects=found.objects[:1], obstacles=[near, far])).splitlines()
    assert lines[0] == f"There is 1 object on the table: a {found.objects[0].colour} {found.objects[0].shape}."
    assert "There are 2 obstacles; the nearest comes first." in lines
    assert "The path ahead is not clear: the obstacle blocks it." in lines


@pytest.mark.parametrize(
    "degrees, name", [(0, "east"), (90, "north"), (112, "north"), (113, "north-west"), (-90, "south"), (200, "west")]
)
def test_compass(degrees, name):
    assert compass(math.radians(degrees)) == name
