"""Detections -> the text observation SmolLM2-135M answers from, plus the detections themselves.

The wording was chosen by measuring the real model on scripted questions over many seeded scenes (see
test/perception/test_vqa_accuracy.py); what a 135M model can and cannot use decided each sentence:
- One fact per sentence, the same sentence shapes in the same order every time, every object named by colour and
  shape. The model answers by copying the sentence whose words best match the question, so each sentence leads with
  what a question would name ("The red object is a red triangle": the colour twice, because the colour is what
  tells that sentence from its neighbours).
- Width comes before distance: asked about a number of an object, the model copies the first number after its name.
- Comparisons are done here (the closest object, the one furthest to the left, whether the obstacle blocks the
  path); the model cannot compare numbers. Only one of leftmost / rightmost is stated: two sentences that differ
  only in "left" / "right" make the model give the same answer to both questions.
- "The path ahead is not clear" rather than "blocked": asked "is the path clear?", the model copies the sentence
  that contains "clear".
- Nothing else: every extra sentence measurably pulled answers to unrelated questions towards itself.
Without a robot in view there is no "left", "away" or "ahead": positions are given in room coordinates.
"""

import math
from dataclasses import dataclass

import numpy as np

from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.detect import DetectedObject, DetectedObstacle, DetectedRobot, Detections, detect

_COMPASS = ("east", "north-east", "north", "north-west", "west", "south-west", "south", "south-east")
PATH_MARGIN_CM = 10.0  # free width needed on each side of the robot's body for the path to count as clear
PATH_RANGE_CM = 250.0  # obstacles further ahead than this do not block the path yet


@dataclass(frozen=True)
class Description:
    text: str
    detections: Detections


def compass(yaw_rad: float) -> str:
    """The nearest of eight compass directions; north is the room's +y (image up)."""
    return _COMPASS[round(math.degrees(yaw_rad) / 45.0) % 8]


def blocks_path(obstacle: DetectedObstacle, robot: DetectedRobot) -> bool:
    """In the corridor the robot sweeps driving straight ahead (its width plus a margin each side), within range."""
    half_width = robot.radius_cm + obstacle.radius_cm + PATH_MARGIN_CM
    return 0.0 < obstacle.ahead_cm <= PATH_RANGE_CM and abs(obstacle.left_cm) < half_width


def _name(obj: DetectedObject) -> str:
    return f"{obj.colour} {obj.shape}"


def _a(words: str) -> str:
    return ("an " if words[0] in "aeiou" else "a ") + words


def _side(left_cm: float) -> str:
    return "left" if left_cm >= 0 else "right"


def _room(x_cm: float, y_cm: float) -> str:
    return f"at x {round(x_cm)} cm, y {round(y_cm)} cm in the room"


def _inventory(objects: list[DetectedObject]) -> str:
    if not objects:
        return "There are no objects on the table."
    names = [_a(_name(o)) for o in objects]
    if len(names) == 1:
        return f"There is 1 object on the table: {names[0]}."
    return f"There are {len(names)} objects on the table: {', '.join(names[:-1])} and {names[-1]}."


def _object(obj: DetectedObject, robot: DetectedRobot | None) -> str:
    where = f"{round(obj.distance_cm)} cm away on the {_side(obj.left_cm)}" if robot else _room(obj.x_cm, obj.y_cm)
    return f"The {obj.colour} object is {_a(_name(obj))}, {round(obj.size_cm)} cm wide, {where}."


def _obstacles(obstacles: list[DetectedObstacle], robot: DetectedRobot | None) -> list[str]:
    if not obstacles:
        return ["There is no obstacle."]
    lines = [] if len(obstacles) == 1 else [f"There are {len(obstacles)} obstacles; the nearest comes first."]
    for obstacle in obstacles:
        if robot:
            where = f"{round(obstacle.distance_cm)} cm away, on the {_side(obstacle.left_cm)}"
        else:
            where = _room(obstacle.x_cm, obstacle.y_cm)
        lines.append(f"The obstacle is {where}.")
    return lines


def text(detections: Detections) -> str:
    """The observation text for these detections (deterministic: the same detections give the same text)."""
    robot, objects = detections.robot, detections.objects
    lines = [_inventory(objects), *(_object(o, robot) for o in objects)]
    if robot and objects:
        leftmost = max(objects, key=lambda o: o.left_cm)
        lines.append(f"The object closest to the robot is the {_name(objects[0])}.")
        lines.append(f"The object furthest to the left is the {_name(leftmost)}.")
    lines += _obstacles(detections.obstacles, robot)
    if robot:
        blocked = any(blocks_path(o, robot) for o in detections.obstacles)
        lines.append("The path ahead is not clear: the obstacle blocks it." if blocked else "The path ahead is clear.")
        lines.append(f"The robot is facing {compass(robot.pose.yaw_rad)}.")
    else:
        lines.append("The robot is not in view.")
    return "\n".join(lines)


def describe(rgb: np.ndarray, camera: CameraModel | None = None) -> Description:
    """Detect everything in an HxWx3 uint8 RGB frame and describe it; ``camera`` defaults to the frame's size."""
    detections = detect(rgb, camera)
    return Description(text(detections), detections)
