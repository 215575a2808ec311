"""Detections -> the text observation a small language model answers from.

Written for SmolLM2-135M: short (well under 200 tokens for six objects), one fact per line in a fixed order, every
object named by colour and shape the same way each time, and the comparisons a 135M model cannot do reliably
(which object is nearest, leftmost, rightmost; whether the obstacle blocks the way) already done here.
"""

import math
from dataclasses import dataclass

import numpy as np

from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.detect import DetectedObject, DetectedObstacle, Detections, detect

_COMPASS = ("east", "north-east", "north", "north-west", "west", "south-west", "south", "south-east")
PATH_MARGIN_CM = 10.0  # extra width on each side of the robot's body that must be free for the path to count clear
PATH_RANGE_CM = 250.0  # obstacles further ahead than this do not block the path yet


@dataclass(frozen=True)
class Description:
    text: str
    detections: Detections


def compass(yaw_rad: float) -> str:
    """The nearest of eight compass directions; north is the room's +y (image up)."""
    return _COMPASS[round(math.degrees(yaw_rad) / 45.0) % 8]


def blocks_path(obstacle: DetectedObstacle, robot_radius_cm: float) -> bool:
    """In the corridor the robot sweeps driving straight ahead (its width plus a margin), within range."""
    if obstacle.ahead_cm is None:
        return False
    half_width = robot_radius_cm + obstacle.radius_cm + PATH_MARGIN_CM
    return 0.0 < obstacle.ahead_cm <= PATH_RANGE_CM and abs(obstacle.left_cm) < half_width


def _name(obj: DetectedObject) -> str:
    return f"{obj.colour} {obj.shape}"


def _side(left_cm: float) -> str:
    return "left" if left_cm >= 0 else "right"


def _listing(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(f"a {n}" for n in names[:-1]) + f" and a {names[-1]}"


def text(detections: Detections) -> str:
    robot, objects = detections.robot, detections.objects
    lines = []
    if robot is None:
        lines.append("The robot is not visible.")
    else:
        pose = robot.pose
        lines.append(f"The robot is at x {pose.x_cm / 100:.1f} m, y {pose.y_cm / 100:.1f} m and faces {compass(pose.yaw_rad)}.")
    if objects:
        lines.append(f"There are {len(objects)} objects on the table: {_listing([_name(o) for o in objects])}.")
    else:
        lines.append("There are no objects on the table.")
    for obj in objects:
        if robot:
            where = f"{round(obj.distance_cm)} cm away, on the {_side(obj.left_cm)}"
        else:
            where = f"at x {round(obj.x_cm)} cm, y {round(obj.y_cm)} cm"
        lines.append(f"The {_name(obj)} is {where}, {round(obj.size_cm)} cm wide.")
    if robot and objects:
        leftmost = max(objects, key=lambda o: o.left_cm)
        rightmost = min(objects, key=lambda o: o.left_cm)
        lines.append(f"The closest object is the {_name(objects[0])}.")
        lines.append(f"The leftmost object is the {_name(leftmost)}.")
        lines.append(f"The rightmost object is the {_name(rightmost)}.")
    for obstacle in detections.obstacles:
        if robot:
            lines.append(f"An obstacle is {round(obstacle.distance_cm)} cm away, on the {_side(obstacle.left_cm)}.")
        else:
            lines.append(f"An obstacle is at x {round(obstacle.x_cm)} cm, y {round(obstacle.y_cm)} cm.")
    if robot:
        blocked = any(blocks_path(o, robot.radius_cm) for o in detections.obstacles)
        lines.append("The path ahead is blocked." if blocked else "The path ahead is clear.")
    return "\n".join(lines)


def describe(rgb: np.ndarray, camera: CameraModel | None = None) -> Description:
    detections = detect(rgb, camera)
    return Description(text(detections), detections)
