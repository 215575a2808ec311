"""A planar laser scanner on the simulated robot: the ranges a LaserScan at the robot's centre would read of the
walking obstacle (a disc), so the simulated base stops on a scan as a real one does.

Only the obstacle is an obstacle: the simulated robot is kept inside the room by the simulator itself (it slides along
the walls) and passes under the table, so walls and table would be obstacles the simulation never has. Rays are
counter-clockwise from the robot's heading, as sensor_msgs/LaserScan's angles; a ray that hits nothing reads inf
(REP 117: no return within range).
"""

import math

import numpy as np

from oxygen_ros.perception.scene import Scene

RAYS = 360
ANGLE_MIN = -math.pi
ANGLE_INCREMENT = 2 * math.pi / RAYS
RANGE_MIN_M = 0.05
RANGE_MAX_M = 4.0


def scan_ranges(scene: Scene, t: float) -> np.ndarray:
    """[RAYS] float32 ranges in metres from the robot at simulated time ``t`` (inf where no ray hits)."""
    robot = scene.robot
    ox, oy = scene.obstacle.position(t)
    ahead, left = robot.relative(ox, oy)
    centre = np.array([ahead, left]) / 100.0
    radius = scene.obstacle.radius_cm / 100.0
    angles = ANGLE_MIN + ANGLE_INCREMENT * np.arange(RAYS)
    directions = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    along = directions @ centre  # where each ray passes closest to the disc's centre
    miss = float(centre @ centre) - along**2  # squared distance of that closest point from the centre
    inside = radius**2 - miss
    hit = (inside >= 0) & (along > 0)
    ranges = np.where(hit, along - np.sqrt(np.maximum(inside, 0.0)), np.inf)
    ranges = np.where(ranges > RANGE_MAX_M, np.inf, np.maximum(ranges, RANGE_MIN_M))
    return ranges.astype(np.float32)
