"""Frame -> detections: coloured objects (colour, shape, position, size), obstacles and the robot's pose, read from
the pixels alone with OpenCV (HSV segmentation, contours, convexity and fill ratios), never from the scene's truth.

Positions are room centimetres through the renderer's ``CameraModel``; once the robot is found, each detection also
carries where it is from the robot's point of view (ahead / left), which is what the robot's questions are about.
"""

import math
from dataclasses import dataclass

import cv2
import numpy as np

from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.palette import OBJECT_COLOURS, ROBOT_BODY, hue
from oxygen_ros.perception.scene import RobotPose

_MIN_SATURATION = 110  # objects and the robot body are >= 190; floor, table and obstacle <= 90
_MIN_VALUE = 90
_MAX_HUE_ERROR = 6  # palette hues are >= 13 apart
_MIN_OBJECT_CM = 4.0  # blobs smaller than a square of this side are noise
_MIN_BODY_CM = 10.0  # obstacles and the robot body are larger than any object
_DARK_MAX_VALUE = 110  # the obstacle is dark grey (60), the floor mid grey (150)
_DARK_MAX_SATURATION = 60
_WHITE_MIN_VALUE = 220  # the robot's nose; the table (the brightest surface) has V 200 and saturation 89
_WHITE_MAX_SATURATION = 50
_MIN_NOSE_CM = 2.0
_STAR_MAX_SOLIDITY = 0.8
_TRIANGLE_MAX_FILL = 0.52  # midway between the triangle's and the square's share of their enclosing circle
_SQUARE_MAX_FILL = 0.8  # midway between the square's and the circle's


@dataclass(frozen=True)
class DetectedRobot:
    pose: RobotPose
    radius_cm: float


@dataclass(frozen=True)
class DetectedObject:
    """``size_cm``: diameter of the smallest circle around the blob. ``ahead_cm`` / ``left_cm``: in the robot's
    frame (negative = behind / right), None when no robot was found in the frame."""

    colour: str
    shape: str
    x_cm: float
    y_cm: float
    size_cm: float
    ahead_cm: float | None
    left_cm: float | None

    @property
    def distance_cm(self) -> float | None:
        return None if self.ahead_cm is None else math.hypot(self.ahead_cm, self.left_cm)


@dataclass(frozen=True)
class DetectedObstacle:
    """An unsaturated dark blob on the floor (a person, a box). ``clearance_cm`` is the gap between the robot's body
    and the obstacle's edge: what a safety stop compares with its threshold."""

    x_cm: float
    y_cm: float
    radius_cm: float
    ahead_cm: float | None
    left_cm: float | None
    clearance_cm: float | None

    @property
    def distance_cm(self) -> float | None:
        return None if self.ahead_cm is None else math.hypot(self.ahead_cm, self.left_cm)


@dataclass(frozen=True)
class Detections:
    objects: list[DetectedObject]  # ordered nearest first (by room position when no robot was found)
    obstacles: list[DetectedObstacle]  # nearest first
    robot: DetectedRobot | None


def _hue_labels() -> np.ndarray:
    """For each OpenCV hue 0..179: the index of the nearest palette hue (object colours, then the robot body), or
    -1 when none is within _MAX_HUE_ERROR. A lookup table turns a frame's hues into labels in one indexing step."""
    hues = np.array([hue(rgb) for rgb in [*OBJECT_COLOURS.values(), ROBOT_BODY]])
    distance = np.abs(np.arange(180)[:, None] - hues[None, :])
    distance = np.minimum(distance, 180 - distance)  # hue wraps at 180
    return np.where(distance.min(axis=1) <= _MAX_HUE_ERROR, distance.argmin(axis=1), -1)


_LABELS = _hue_labels()
_ROBOT_LABEL = len(OBJECT_COLOURS)


def _blobs(mask: np.ndarray, min_area_px: float) -> list[np.ndarray]:
    """Outer contours of the mask's blobs; specks of noise fall under ``min_area_px``. (No morphological opening:
    it would blunt the corners that tell a triangle from a square.)"""
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    return [c for c in contours if cv2.contourArea(c) >= min_area_px]


def classify_shape(contour: np.ndarray) -> str:
    """circle, square, triangle or star from the outline. A star is the only concave shape (area / convex hull area
    ~0.6, convex ones ~1). The convex ones fill different shares of their enclosing circle: triangle 0.41, square
    0.64, circle 1; those ratios survive rotation and pixelation better than counting polygon corners."""
    area = cv2.contourArea(contour)
    if area < _STAR_MAX_SOLIDITY * cv2.contourArea(cv2.convexHull(contour)):
        return "star"
    fill = area / (math.pi * cv2.minEnclosingCircle(contour)[1] ** 2)
    return "triangle" if fill < _TRIANGLE_MAX_FILL else "square" if fill < _SQUARE_MAX_FILL else "circle"


def _centre(contour: np.ndarray) -> tuple[float, float]:
    m = cv2.moments(contour)
    return m["m10"] / m["m00"], m["m01"] / m["m00"]


def _find_robot(hsv: np.ndarray, labels: np.ndarray, camera: CameraModel) -> DetectedRobot | None:
    """The largest cyan blob is the body; the white blob inside it is the nose, which gives the heading (a body
    without a nose gives no heading, so no robot)."""
    body = _blobs(labels == _ROBOT_LABEL, (_MIN_BODY_CM * camera.px_per_cm) ** 2)
    if not body:
        return None
    (cu, cv), radius_px = cv2.minEnclosingCircle(max(body, key=cv2.contourArea))
    inside = np.zeros(labels.shape, np.uint8)
    cv2.circle(inside, (round(cu), round(cv)), round(radius_px), 1, -1)
    white = (hsv[..., 2] >= _WHITE_MIN_VALUE) & (hsv[..., 1] <= _WHITE_MAX_SATURATION) & (inside > 0)
    nose = _blobs(white, (_MIN_NOSE_CM * camera.px_per_cm) ** 2)
    if not nose:
        return None
    nu, nv = _centre(max(nose, key=cv2.contourArea))
    x, y = camera.to_room(cu, cv)
    yaw = math.atan2(-(nv - cv), nu - cu)  # image rows grow southwards
    return DetectedRobot(RobotPose(x, y, yaw), radius_px / camera.px_per_cm)


def detect(rgb: np.ndarray, camera: CameraModel | None = None) -> Detections:
    """Everything found in one HxWx3 uint8 RGB frame; ``camera`` defaults to the model for the frame's size."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 uint8 RGB frame, got {rgb.dtype} {rgb.shape}")
    camera = camera or CameraModel(width=rgb.shape[1], height=rgb.shape[0])
    hsv = cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV)
    saturated = (hsv[..., 1] >= _MIN_SATURATION) & (hsv[..., 2] >= _MIN_VALUE)
    labels = np.where(saturated, _LABELS[hsv[..., 0]], -1)

    found = _find_robot(hsv, labels, camera)
    pose = found.pose if found else None

    def relative(x: float, y: float) -> tuple[float | None, float | None]:
        return pose.relative(x, y) if pose else (None, None)

    objects = []
    for i, colour in enumerate(OBJECT_COLOURS):
        for contour in _blobs(labels == i, (_MIN_OBJECT_CM * camera.px_per_cm) ** 2):
            x, y = camera.to_room(*_centre(contour))
            size = 2 * cv2.minEnclosingCircle(contour)[1] / camera.px_per_cm
            objects.append(DetectedObject(colour, classify_shape(contour), x, y, size, *relative(x, y)))

    dark = (hsv[..., 2] <= _DARK_MAX_VALUE) & (hsv[..., 1] <= _DARK_MAX_SATURATION)
    obstacles = []
    for contour in _blobs(dark, (_MIN_BODY_CM * camera.px_per_cm) ** 2):
        (u, v), radius_px = cv2.minEnclosingCircle(contour)
        x, y = camera.to_room(u, v)
        radius = radius_px / camera.px_per_cm
        ahead, left = relative(x, y)
        clearance = math.hypot(ahead, left) - radius - found.radius_cm if found else None
        obstacles.append(DetectedObstacle(x, y, radius, ahead, left, clearance))

    def nearest_first(d: DetectedObject | DetectedObstacle) -> tuple[float, float]:
        return (d.distance_cm, 0.0) if pose else (-d.y_cm, d.x_cm)

    return Detections(sorted(objects, key=nearest_first), sorted(obstacles, key=nearest_first), found)
