"""Draw a ``Scene`` at time ``t`` as the overhead camera sees it: an HxWx3 uint8 RGB frame.

Shapes are drawn without anti-aliasing so every object pixel has its palette colour before noise; a little seeded
sensor noise is then added, so the describer is tested on pixels that are not exactly the palette's, and
the same (scene, t) still gives the same frame.
"""

import math

import cv2
import numpy as np

from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.palette import FLOOR, OBJECT_COLOURS, OBSTACLE, ROBOT_BODY, ROBOT_NOSE, TABLE
from oxygen_ros.perception.scene import Scene, SceneObject

ROBOT_RADIUS_CM = 15.0
NOSE_RADIUS_CM = 4.0
NOSE_OFFSET_CM = 10.0  # from the robot's centre along its heading
_STAR_INNER = 0.45  # inner / outer radius of the five-pointed star
_SHIFT = 4  # OpenCV draws at 1/16 pixel: centres are not snapped to whole pixels, so headings keep their precision
_SUBPIXEL = 1 << _SHIFT


def shape_outline(obj: SceneObject, camera: CameraModel) -> np.ndarray:
    """Polygon vertices (int32, 1/16 pixels) of a square, triangle or star, on the object's circle, rotated."""
    corners = {"square": 4, "triangle": 3, "star": 10}[obj.shape]
    cu, cv = camera.to_pixel(obj.x_cm, obj.y_cm)
    radius = obj.size_cm / 2 * camera.px_per_cm
    points = []
    for i in range(corners):
        r = radius * (_STAR_INNER if obj.shape == "star" and i % 2 else 1.0)
        angle = math.radians(obj.rotation_deg) + 2 * math.pi * i / corners
        points.append((cu + r * math.cos(angle), cv + r * math.sin(angle)))
    return np.round(np.array(points) * _SUBPIXEL).astype(np.int32)


def _disc(frame: np.ndarray, camera: CameraModel, x_cm: float, y_cm: float, radius_cm: float, rgb) -> None:
    u, v = camera.to_pixel(x_cm, y_cm)
    centre = (round(u * _SUBPIXEL), round(v * _SUBPIXEL))
    cv2.circle(frame, centre, round(radius_cm * camera.px_per_cm * _SUBPIXEL), rgb, -1, cv2.LINE_8, _SHIFT)


def render(scene: Scene, t: float, camera: CameraModel, noise: int = 3) -> np.ndarray:
    """The frame at time ``t``; ``noise``: each channel of each pixel is moved by a seeded uniform integer in
    [-noise, noise] (uniform integers are ten times cheaper to draw than Gaussian floats at 640x480)."""
    frame = np.empty((camera.height, camera.width, 3), dtype=np.uint8)
    frame[:] = FLOOR
    table = scene.table
    u0, v0 = camera.to_pixel(table.x0, table.y1)
    u1, v1 = camera.to_pixel(table.x1, table.y0)
    cv2.rectangle(frame, (round(u0), round(v0)), (round(u1), round(v1)), TABLE, -1)
    for obj in scene.objects:
        rgb = OBJECT_COLOURS[obj.colour]
        if obj.shape == "circle":
            _disc(frame, camera, obj.x_cm, obj.y_cm, obj.size_cm / 2, rgb)
        else:
            cv2.fillPoly(frame, [shape_outline(obj, camera)], rgb, cv2.LINE_8, _SHIFT)
    ox, oy = scene.obstacle.position(t)
    _disc(frame, camera, ox, oy, scene.obstacle.radius_cm, OBSTACLE)
    robot = scene.robot
    _disc(frame, camera, robot.x_cm, robot.y_cm, ROBOT_RADIUS_CM, ROBOT_BODY)
    nose_x = robot.x_cm + NOSE_OFFSET_CM * math.cos(robot.yaw_rad)
    nose_y = robot.y_cm + NOSE_OFFSET_CM * math.sin(robot.yaw_rad)
    _disc(frame, camera, nose_x, nose_y, NOSE_RADIUS_CM, ROBOT_NOSE)
    if noise > 0:
        rng = np.random.default_rng((scene.seed, round(t * 1000) & 0xFFFFFFFF))
        noisy = frame + rng.integers(-noise, noise + 1, frame.shape, dtype=np.int16)
        frame = np.clip(noisy, 0, 255).astype(np.uint8)
    return frame
