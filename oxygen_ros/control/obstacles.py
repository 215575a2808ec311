"""What stops the base: obstacle points from a laser scan or a depth image, brought into the base frame, and the
nearest one in the corridor the robot is about to drive through.

Pure geometry (numpy), as nav2's collision monitor does it for its "stop" polygon: every range reading becomes a
point, every depth pixel (subsampled) a 3-D point through the camera's intrinsics; points are moved into the base
frame by the sensor's transform; depth points outside [min_height, max_height] above the base (the floor, the
ceiling) are dropped; a point stops the robot when it is ahead of the base centre (x > 0), inside the corridor swept
by the robot's footprint circle widened by the clearance (|y| <= radius + clearance), and its gap to the footprint
is under the clearance. The node decides what a missing or stale source means (it stops); this module only measures.
"""

import math
from dataclasses import dataclass

import numpy as np

MAX_SCAN_POINTS = 16384  # readings per LaserScan considered (more are refused by the node as malformed)
MAX_DEPTH_POINTS = 20000  # depth pixels projected per image: the image is subsampled to stay under it


@dataclass(frozen=True)
class Blocking:
    """The obstacle point that stops the robot: its gap to the robot's footprint and how far ahead it is, metres."""

    gap_m: float
    ahead_m: float


def scan_points(ranges: np.ndarray, angle_min: float, angle_increment: float, range_min: float,
                range_max: float) -> np.ndarray:  # fmt: skip
    """[N, 3] points in the scan's frame from its valid readings (finite, within [range_min, range_max]), as
    sensor_msgs/LaserScan defines them: reading i at angle_min + i * angle_increment, counter-clockwise from x."""
    ranges = np.asarray(ranges, dtype=np.float64)
    angles = angle_min + angle_increment * np.arange(ranges.size)
    valid = np.isfinite(ranges) & (ranges >= range_min) & (ranges <= range_max)
    r, a = ranges[valid], angles[valid]
    return np.stack([r * np.cos(a), r * np.sin(a), np.zeros_like(r)], axis=1)


def depth_points(depth_m: np.ndarray, fx: float, fy: float, cx: float, cy: float,
                 max_points: int = MAX_DEPTH_POINTS) -> np.ndarray:  # fmt: skip
    """[N, 3] points in the camera's optical frame (REP 103: x right, y down, z forward) from a depth image in
    metres, every ``stride``-th pixel in both directions so that at most ``max_points`` are projected; pixels
    without a finite positive depth are skipped."""
    height, width = depth_m.shape
    stride = max(1, math.ceil(math.sqrt(height * width / max_points)))
    v, u = np.mgrid[0:height:stride, 0:width:stride]
    z = depth_m[::stride, ::stride].astype(np.float64)
    valid = np.isfinite(z) & (z > 0)
    z, u, v = z[valid], u[valid], v[valid]
    return np.stack([(u - cx) * z / fx, (v - cy) * z / fy, z], axis=1)


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


def blocking(points: np.ndarray, radius_m: float, clearance_m: float) -> Blocking | None:
    """The point in the base frame that stops a robot of footprint radius ``radius_m`` driving forward with
    ``clearance_m`` to spare (the one with the smallest gap), or None when the corridor is clear."""
    if not len(points):
        return None
    x, y = points[:, 0], points[:, 1]
    gap = np.hypot(x, y) - radius_m
    stops = (x > 0) & (np.abs(y) <= radius_m + clearance_m) & (gap < clearance_m)
    if not stops.any():
        return None
    nearest = int(np.argmin(np.where(stops, gap, np.inf)))
    return Blocking(max(0.0, float(gap[nearest])), float(x[nearest]))
