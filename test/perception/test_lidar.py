"""camera_sim's laser: the ray towards the walking obstacle reads its distance from the robot less its radius, rays
that miss read inf, and the readings agree with a brute-force march along each ray."""

import math
from dataclasses import replace

import numpy as np

from oxygen_ros.perception import lidar
from oxygen_ros.perception.scene import RobotPose, make_scene


def _march(scene, t: float, angle: float) -> float:
    """The first 1 mm step along the ray that is inside the obstacle (inf if none within range), metres."""
    ox, oy = scene.obstacle.position(t)
    heading = scene.robot.yaw_rad + angle
    for step in range(1, int(lidar.RANGE_MAX_M * 1000) + 1):
        x = scene.robot.x_cm + 0.1 * step * math.cos(heading)
        y = scene.robot.y_cm + 0.1 * step * math.sin(heading)
        if math.hypot(x - ox, y - oy) <= scene.obstacle.radius_cm:
            return step / 1000
    return math.inf


def test_the_scan_sees_the_obstacle_where_it_is():
    scene = make_scene(0)
    t = 3.0
    ox, oy = scene.obstacle.position(t)
    scene = replace(scene, robot=RobotPose(ox - 120.0, oy, 0.0))  # 1.2 m west of it, facing it
    ranges = lidar.scan_ranges(scene, t)
    ahead = int(round((0.0 - lidar.ANGLE_MIN) / lidar.ANGLE_INCREMENT))
    assert math.isclose(ranges[ahead], 1.2 - scene.obstacle.radius_cm / 100, abs_tol=1e-4)
    assert np.isinf(ranges[0])  # straight behind: nothing
    for index in range(0, lidar.RAYS, 7):
        expected = _march(scene, t, lidar.ANGLE_MIN + index * lidar.ANGLE_INCREMENT)
        assert (np.isinf(ranges[index]) and math.isinf(expected)) or abs(ranges[index] - expected) <= 1.5e-3
