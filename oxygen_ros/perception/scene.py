"""A deterministic synthetic room from a seed, with its ground truth: a table with 3-6 coloured objects of several
shapes, a grey obstacle (a person seen from above) crossing the floor, and the robot's pose.

Ground truth is kept here so tests can grade the describer, which never sees it: it only reads rendered frames.
All lengths are centimetres in the room frame of ``camera.py``.
"""

import math
from dataclasses import dataclass

import numpy as np

from oxygen_ros.perception.camera import ROOM_DEPTH_CM, ROOM_WIDTH_CM
from oxygen_ros.perception.palette import OBJECT_COLOURS

SHAPES = ("circle", "square", "triangle", "star")
_ROBOT_MARGIN_CM = 20.0  # a little more than the robot's radius


@dataclass(frozen=True)
class Rect:
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass(frozen=True)
class SceneObject:
    """``size_cm`` is the diameter of the circle the shape is inscribed in (its extent whatever its rotation)."""

    colour: str
    shape: str
    x_cm: float
    y_cm: float
    size_cm: float
    rotation_deg: float


@dataclass(frozen=True)
class RobotPose:
    x_cm: float
    y_cm: float
    yaw_rad: float  # counter-clockwise from east (+x)

    def relative(self, x_cm: float, y_cm: float) -> tuple[float, float]:
        """(ahead, left) of a room point in the robot's frame, in cm; negative = behind / to the right."""
        dx, dy = x_cm - self.x_cm, y_cm - self.y_cm
        c, s = math.cos(self.yaw_rad), math.sin(self.yaw_rad)
        return dx * c + dy * s, -dx * s + dy * c

    def moved(self, linear_cm_s: float, angular_rad_s: float, dt: float) -> "RobotPose":
        """The pose after driving a unicycle at these speeds for ``dt`` seconds (exact arc), kept inside the room
        by ``_ROBOT_MARGIN_CM`` so the camera always sees the whole robot."""
        yaw = self.yaw_rad + angular_rad_s * dt
        if abs(angular_rad_s) > 1e-9:
            r = linear_cm_s / angular_rad_s
            x = self.x_cm + r * (math.sin(yaw) - math.sin(self.yaw_rad))
            y = self.y_cm - r * (math.cos(yaw) - math.cos(self.yaw_rad))
        else:
            x = self.x_cm + linear_cm_s * dt * math.cos(yaw)
            y = self.y_cm + linear_cm_s * dt * math.sin(yaw)
        x = min(max(x, _ROBOT_MARGIN_CM), ROOM_WIDTH_CM - _ROBOT_MARGIN_CM)
        y = min(max(y, _ROBOT_MARGIN_CM), ROOM_DEPTH_CM - _ROBOT_MARGIN_CM)
        return RobotPose(x, y, math.atan2(math.sin(yaw), math.cos(yaw)))


@dataclass(frozen=True)
class Obstacle:
    """A disc walking east-west along ``y_cm`` between ``x_min`` and ``x_max`` and back (a triangle wave)."""

    y_cm: float
    radius_cm: float
    x_min: float
    x_max: float
    speed_cm_s: float
    phase_s: float

    def _leg(self, t: float) -> tuple[float, bool]:
        """How far east of ``x_min`` the obstacle is at time ``t``, and whether it is walking east."""
        span = self.x_max - self.x_min
        travelled = (self.speed_cm_s * (t + self.phase_s)) % (2 * span)
        return (travelled, True) if travelled < span else (2 * span - travelled, False)

    def position(self, t: float) -> tuple[float, float]:
        return self.x_min + self._leg(t)[0], self.y_cm

    def velocity(self, t: float) -> tuple[float, float]:
        return (self.speed_cm_s if self._leg(t)[1] else -self.speed_cm_s), 0.0


@dataclass(frozen=True)
class Scene:
    seed: int
    table: Rect
    objects: tuple[SceneObject, ...]
    robot: RobotPose
    obstacle: Obstacle


TABLE = Rect(40.0, 150.0, 280.0, 228.0)
_EDGE_MARGIN_CM = 4.0
_GAP_CM = 8.0  # between the circles of two objects, so their blobs never touch


def _place_objects(rng: np.random.Generator, count: int) -> tuple[SceneObject, ...]:
    colours = rng.choice(list(OBJECT_COLOURS), size=count, replace=False)
    placed: list[SceneObject] = []
    for colour in colours:
        size = float(rng.uniform(12.0, 20.0))
        r = size / 2 + _EDGE_MARGIN_CM
        while True:  # the table fits six of the largest objects many times over, so this ends quickly
            x = float(rng.uniform(TABLE.x0 + r, TABLE.x1 - r))
            y = float(rng.uniform(TABLE.y0 + r, TABLE.y1 - r))
            if all(math.hypot(x - o.x_cm, y - o.y_cm) >= (size + o.size_cm) / 2 + _GAP_CM for o in placed):
                break
        shape = str(rng.choice(SHAPES))
        placed.append(SceneObject(str(colour), shape, x, y, size, float(rng.uniform(0.0, 360.0))))
    return tuple(placed)


def make_scene(seed: int) -> Scene:
    """The same seed always gives the same scene."""
    rng = np.random.default_rng(seed)
    objects = _place_objects(rng, int(rng.integers(3, 7)))
    robot = RobotPose(
        x_cm=float(rng.uniform(100.0, 220.0)),
        y_cm=float(rng.uniform(25.0, 45.0)),
        yaw_rad=math.radians(float(rng.uniform(70.0, 110.0))),
    )
    obstacle = Obstacle(
        y_cm=float(rng.uniform(85.0, 115.0)),
        radius_cm=float(rng.uniform(14.0, 18.0)),
        x_min=25.0,
        x_max=ROOM_WIDTH_CM - 25.0,
        speed_cm_s=float(rng.uniform(30.0, 60.0)),
        phase_s=float(rng.uniform(0.0, 20.0)),
    )
    return Scene(seed, TABLE, objects, robot, obstacle)
