"""What stops the base: obstacle points from a laser scan or a depth image, brought into the base frame as it is
now, and the nearest one in the corridor the robot is about to drive through.

Pure geometry (numpy), as nav2's collision monitor does it for its "stop" polygon: every range reading becomes a
point (REP 117: -inf, an object too close to measure, counts as one at range_min), every depth pixel (subsampled)
a 3-D point through the camera's intrinsics (a pixel with no finite depth is none, as depth_image_proc's cloud
drops it for nav2: the node judges a view too close to measure as a whole); points are moved into the base frame
by the sensor's transform and then by the robot's own motion since the reading was taken (nav2's
``base_shift_correction``), so an old reading is placed where the obstacle is now relative to the robot; depth
points outside [min_height, max_height] above the base (the floor, the ceiling) are dropped.

The robot is a circle of ``radius`` about the base frame's origin that drives forward (or turns in place). A point
stops forward motion when it lies in the corridor the circle sweeps (|y| <= radius + SIDE_MARGIN_M) and its
forward gap, how far the circle can advance before touching it, is under the clearance; a point inside the circle
(plus the margin) stops turning too. The node decides what a missing or stale source means (it stops); this module
only measures.
"""

import math
from dataclasses import dataclass

import numpy as np

MAX_SCAN_POINTS = 16384  # readings per LaserScan considered (more are refused by the node as malformed)
MAX_DEPTH_POINTS = 20000  # depth pixels projected per image: the image is subsampled to stay under it
SIDE_MARGIN_M = 0.05  # the corridor's half-width over the radius: a turning robot's path bulges a little
MIN_SCAN_STEP = 1e-6  # rad: a scan's bearings closer than this (one beam) place no ray


@dataclass(frozen=True)
class Blocking:
    """The obstacle point that stops the robot: how far it can advance before touching it and how far ahead the
    point is, metres; ``touching``: a point is within the footprint (plus the margin), so turning is unsafe too."""

    gap_m: float
    ahead_m: float
    touching: bool = False


def scan_points(ranges: np.ndarray, angle_min: float, angle_increment: float, range_min: float,
                range_max: float) -> np.ndarray:  # fmt: skip
    """[N, 3] points in the scan's frame from its valid readings (finite, within [range_min, range_max]), as
    sensor_msgs/LaserScan defines them: reading i at angle_min + i * angle_increment, counter-clockwise from x."""
    ranges = np.asarray(ranges, dtype=np.float64)
    angles = angle_min + angle_increment * np.arange(ranges.size)
    ranges = np.where(ranges == -np.inf, range_min, ranges)  # REP 117: too close to measure
    valid = np.isfinite(ranges) & (ranges >= range_min) & (ranges <= range_max)
    r, a = ranges[valid], angles[valid]
    return np.stack([r * np.cos(a), r * np.sin(a), np.zeros_like(r)], axis=1)


def depth_points(depth_m: np.ndarray, fx: float, fy: float, cx: float, cy: float,
                 max_points: int = MAX_DEPTH_POINTS) -> np.ndarray:  # fmt: skip
    """[N, 3] points in the camera's optical frame (REP 103: x right, y down, z forward) from a depth image in
    metres, every ``depth_stride``-th pixel in both directions (at most ``max_points`` projected); pixels without a
    finite positive depth are skipped."""
    height, width = depth_m.shape
    stride = depth_stride(height, width, max_points)
    v, u = np.mgrid[0:height:stride, 0:width:stride]
    z = depth_m[::stride, ::stride].astype(np.float64)
    valid = np.isfinite(z) & (z > 0)
    z, u, v = z[valid], u[valid], v[valid]
    return np.stack([(u - cx) * z / fx, (v - cy) * z / fy, z], axis=1)


def depth_stride(height: int, width: int, max_points: int = MAX_DEPTH_POINTS) -> int:
    """The pixel step in both directions that leaves at most ``max_points`` of a ``height`` x ``width`` image."""
    stride = max(1, math.ceil(math.sqrt(height * width / max_points)))
    while -(-height // stride) * -(-width // stride) > max_points:
        stride += 1
    return stride


def moved(points: np.ndarray, translation: tuple[float, float, float],
          rotation: tuple[float, float, float, float]) -> np.ndarray:  # fmt: skip
    """``points`` [N, 3] mapped by the rigid transform (translation, unit quaternion x, y, z, w)."""
    x, y, z, w = rotation
    matrix = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
    return points @ matrix.T + np.asarray(translation)


def within_heights(points: np.ndarray, min_height: float, max_height: float) -> np.ndarray:
    """The points whose height above the base frame's origin is in [min_height, max_height]."""
    return points[(points[:, 2] >= min_height) & (points[:, 2] <= max_height)]


def since(points: np.ndarray, then: tuple[float, float, float], now: tuple[float, float, float]) -> np.ndarray:
    """Points of the base frame at pose ``then`` (x, y, yaw in odom) in the base frame at pose ``now``: where a
    static obstacle measured then lies relative to the robot now."""
    dx, dy = then[0] - now[0], then[1] - now[1]
    c, s = math.cos(now[2]), math.sin(now[2])
    yaw = then[2] - now[2]
    translation = (c * dx + s * dy, -s * dx + c * dy, 0.0)
    return moved(points, translation, (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)))


def blocking(points: np.ndarray, radius_m: float, clearance_m: float) -> Blocking | None:
    """The point in the base frame that stops a robot of footprint radius ``radius_m`` driving forward with
    ``clearance_m`` to spare (the one with the smallest forward gap), or None when the corridor is clear."""
    if not len(points):
        return None
    x, y = points[:, 0], points[:, 1]
    inside = np.hypot(x, y) < radius_m + SIDE_MARGIN_M
    gap = x - np.sqrt(np.maximum(radius_m**2 - y**2, 0.0))  # how far the circle advances before touching it
    stops = inside | ((x > 0) & (np.abs(y) <= radius_m + SIDE_MARGIN_M) & (gap < clearance_m))
    if not stops.any():
        return None
    nearest = int(np.argmin(np.where(stops, gap, np.inf)))
    return Blocking(max(0.0, float(gap[nearest])), float(x[nearest]), bool(inside.any()))


def scan_reaches(points: np.ndarray, ranges: np.ndarray, angle_min: float, angle_increment: float, range_min: float,
                 range_max: float, tolerance_m: float) -> np.ndarray:  # fmt: skip
    """For points [N, 3] in a scan's frame, whether the scan's ray through each reached it or passed it (its return
    at least that far, or nothing within range_max while the point is within it): a point there then is either in
    this scan or gone. A point off every bearing, or on a ray that says nothing (NaN, under range_min) or stopped
    short of it (something nearer hides it, REP 117's -inf too), is not reached."""
    n, step = len(ranges), abs(angle_increment)
    if not len(points) or not n or step < MIN_SCAN_STEP:  # (one beam: no bearing between rays to judge by)
        return np.zeros(len(points), dtype=bool)
    bearing = np.arctan2(points[:, 1], points[:, 0])
    rays = np.remainder((bearing - angle_min) * np.sign(angle_increment), 2 * math.pi) / step
    on_a_ray = rays <= n - 1  # between the first and the last bearing: one just past the view is not judged by it
    ray = np.where(on_a_ray, np.rint(rays), 0).astype(np.int64)
    measured = np.asarray(ranges, dtype=np.float64)[ray]
    distance = np.hypot(points[:, 0], points[:, 1])
    passed = (measured == np.inf) | (np.isfinite(measured) & (measured > range_max))
    reached = np.isfinite(measured) & (measured >= range_min) & (measured <= range_max) & \
        (measured >= distance - tolerance_m)  # fmt: skip
    return on_a_ray & ((passed & (distance <= range_max)) | reached)


def depth_reaches(points: np.ndarray, depth_m: np.ndarray, fx: float, fy: float, cx: float, cy: float,
                  tolerance_m: float) -> np.ndarray:  # fmt: skip
    """For points [N, 3] in a depth camera's optical frame, whether the pixel each projects to (of ``depth_m`` with
    these intrinsics) measured at least its depth: a point there then is either in this image or gone. A point
    outside the image or behind the camera, or on a pixel with no depth (NaN, REP 117's -inf: under the camera's
    minimum range) or a nearer one (hidden), is not reached."""
    if not len(points):
        return np.zeros(0, dtype=bool)
    height, width = depth_m.shape
    z = points[:, 2]
    ahead = z > 0
    safe_z = np.where(ahead, z, 1.0)
    u, v = points[:, 0] * fx / safe_z + cx, points[:, 1] * fy / safe_z + cy
    # within the pixels' span: one just past the edge is not judged by the edge pixel
    inside = ahead & (u >= 0) & (u <= width - 1) & (v >= 0) & (v <= height - 1)
    u, v = np.where(inside, np.rint(u), 0).astype(np.int64), np.where(inside, np.rint(v), 0).astype(np.int64)
    measured = depth_m[v, u].astype(np.float64)
    return inside & np.isfinite(measured) & (measured > 0) & (measured >= z - tolerance_m)
