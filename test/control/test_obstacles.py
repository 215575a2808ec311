"""Obstacle geometry against references we did not write: LaserScan readings against their definition, depth pixels
against OpenCV's pinhole projection (cv2.projectPoints), transforms against the quaternion algebra of
``oxygen_ros.nodes.tf.rigid`` (an independent path), and the stop corridor on hand-placed points."""

import math

import cv2
import numpy as np
import pytest

from oxygen_ros.control import obstacles
from oxygen_ros.nodes.tf.rigid import Rigid


def test_scan_points_follow_the_laserscan_definition_and_drop_invalid_readings():
    ranges = np.array([1.0, math.nan, 2.0, math.inf, 0.01, 50.0, 3.0])
    points = obstacles.scan_points(ranges, angle_min=-0.5, angle_increment=0.25, range_min=0.05, range_max=10.0)
    kept = [(1.0, -0.5), (2.0, 0.0), (3.0, 1.0)]  # (range, angle) of the valid readings 0, 2 and 6
    expected = [(r * math.cos(a), r * math.sin(a), 0.0) for r, a in kept]
    np.testing.assert_allclose(points, expected, atol=1e-12)


def test_depth_pixels_land_on_the_points_opencv_projected_there():
    fx, fy, cx, cy = 300.0, 280.0, 80.0, 60.0
    rng = np.random.default_rng(0)
    truth = np.stack([rng.uniform(-0.5, 0.5, 50), rng.uniform(-0.3, 0.3, 50), rng.uniform(0.5, 3.0, 50)], axis=1)
    camera = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]])
    pixels, _ = cv2.projectPoints(truth, np.zeros(3), np.zeros(3), camera, None)
    inside = [(0 <= u < 159.5) and (0 <= v < 119.5) for u, v in pixels[:, 0]]
    truth, pixels = truth[inside], pixels[inside]
    assert len(truth) > 30
    depth = np.full((120, 160), np.nan, np.float32)
    for (u, v), point in zip(pixels[:, 0], truth):
        depth[int(round(v)), int(round(u))] = point[2]
    points = obstacles.depth_points(depth, fx, fy, cx, cy)
    assert len(points) == len({(int(round(u)), int(round(v))) for u, v in pixels[:, 0]})
    for point in truth:  # each within the pixel grid's rounding of OpenCV's projection
        nearest = points[np.argmin(np.linalg.norm(points - point, axis=1))]
        assert np.all(np.abs(nearest - point) <= [0.5 * point[2] / fx + 1e-6, 0.5 * point[2] / fy + 1e-6, 1e-6])


def test_depth_images_are_subsampled_to_the_point_bound():
    depth = np.ones((480, 640), np.float32)
    assert len(obstacles.depth_points(depth, 500.0, 500.0, 320.0, 240.0, max_points=1000)) <= 1000


@pytest.mark.parametrize("seed", range(5))
def test_moved_points_equal_the_rigid_transform_of_each_point(seed):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=4)
    rigid = Rigid(tuple(rng.normal(size=3)), tuple(q / np.linalg.norm(q)))
    points = rng.normal(size=(20, 3))
    expected = [rigid.apply(tuple(p)) for p in points]
    np.testing.assert_allclose(obstacles.moved(points, rigid.translation, rigid.rotation), expected, atol=1e-12)


def test_floor_and_ceiling_points_are_no_obstacle():
    points = np.array([[1.0, 0.0, 0.01], [1.0, 0.0, 0.5], [1.0, 0.0, 2.5]])
    np.testing.assert_array_equal(obstacles.within_heights(points, 0.05, 2.0), [[1.0, 0.0, 0.5]])


def test_only_points_in_the_corridor_ahead_within_the_clearance_stop_the_robot():
    radius, clearance = 0.2, 0.25
    assert obstacles.blocking(np.zeros((0, 3)), radius, clearance) is None
    far_ahead, behind, aside = [1.0, 0.0, 0.0], [-0.3, 0.0, 0.0], [0.1, 0.5, 0.0]
    beside_the_corridor = [0.01, 0.44, 0.0]  # 24 cm from the footprint's edge, but never in its way driving ahead
    doorway_jamb = [0.1, 0.4, 0.0]
    assert obstacles.blocking(np.array([far_ahead, behind, aside, beside_the_corridor, doorway_jamb]), radius,
                              clearance) is None  # fmt: skip
    near, nearer = [0.4, 0.1, 0.0], [0.3, -0.05, 0.0]
    found = obstacles.blocking(np.array([far_ahead, near, nearer, behind]), radius, clearance)
    # how far the circle advances before touching (0.3, -0.05): 0.3 - sqrt(0.2^2 - 0.05^2)
    assert found is not None and math.isclose(found.gap_m, 0.3 - math.sqrt(0.2**2 - 0.05**2))
    assert found.ahead_m == 0.3 and not found.touching
    touching = obstacles.blocking(np.array([[0.1, 0.0, 0.0]]), radius, clearance)  # inside the footprint
    assert touching is not None and touching.gap_m == 0.0 and touching.touching


def test_readings_too_close_to_measure_are_obstacles_at_the_minimum_range():
    points = obstacles.scan_points(np.array([-math.inf, math.inf]), 0.0, 0.5, 0.1, 10.0)
    np.testing.assert_allclose(points, [[0.1, 0.0, 0.0]])  # REP 117: -inf too close, +inf nothing in range


def test_a_reading_taken_before_the_robot_moved_lands_where_the_obstacle_is_now():
    """Against the rigid-transform algebra of oxygen_ros.nodes.tf.rigid: base_then -> odom -> base_now."""
    then, now = (1.0, 2.0, 0.3), (1.4, 2.1, 0.9)
    points = np.array([[0.8, 0.1, 0.0], [0.5, -0.4, 0.2]])
    moved = obstacles.since(points, then, now)
    from oxygen_ros.nodes.tf.rigid import planar

    expected = [(planar(*now).inverse() * planar(*then)).apply(tuple(p)) for p in points]
    np.testing.assert_allclose(moved, expected, atol=1e-12)
    np.testing.assert_allclose(obstacles.since(points, then, then), points, atol=1e-12)


def test_the_depth_stride_keeps_every_image_under_the_point_bound():
    for height, width in ((239, 4096), (480, 640), (1, 8192), (8192, 8192)):
        stride = obstacles.depth_stride(height, width, 20000)
        assert -(-height // stride) * -(-width // stride) <= 20000


def test_a_scans_ray_reaches_a_point_it_returned_at_or_past_and_no_other():
    """Rays at -90, 0, 90, 180 degrees (the last clockwise from the first: angle_increment -90 degrees would give
    the same bearings): nothing in range, a return at 2 m, NaN, and REP 117's -inf (too close)."""
    ranges = np.array([math.inf, 2.0, math.nan, -math.inf])
    at = np.array([[0.0, -3.0, 0.0], [0.0, -12.0, 0.0],  # nothing within 10 m: reached within range_max only
                   [1.5, 0.0, 0.0], [2.03, 0.0, 0.0], [3.0, 0.0, 0.0],  # passed, at (range noise), hidden
                   [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])  # on the NaN ray, on the -inf one: unknown
    reached = obstacles.scan_reaches(at, ranges, -math.pi / 2, math.pi / 2, 0.05, 10.0, 0.05)
    assert reached.tolist() == [True, False, True, True, False, False, False]
    clockwise = obstacles.scan_reaches(at, ranges[[0, 3, 2, 1]], -math.pi / 2, -math.pi / 2, 0.05, 10.0, 0.05)
    assert clockwise.tolist() == reached.tolist()
    narrow = obstacles.scan_reaches(at[:1], np.array([math.inf] * 3), -0.1, 0.1, 0.05, 10.0, 0.05)
    assert narrow.tolist() == [False]  # off every bearing of a narrow scan
    edge = np.array([[math.cos(b), math.sin(b), 0.0] for b in (0.1, 0.1 + 0.02, -0.1 - 0.02)])
    assert obstacles.scan_reaches(edge, np.array([math.inf] * 3), -0.1, 0.1, 0.05, 10.0, 0.05).tolist() == \
        [True, False, False]  # just past the last and the first bearing: not judged by them  # fmt: skip
    one_beam = obstacles.scan_reaches(at, np.array([math.inf]), 0.0, 0.0, 0.05, 10.0, 0.05)
    assert not one_beam.any()  # no bearing between rays to judge by (it raised IndexError)


def test_a_depth_pixel_reaches_a_point_at_or_before_its_depth_and_no_other():
    depth = np.full((4, 4), 2.0)
    depth[0, 0], depth[3, 3] = math.nan, -math.inf
    k = (2.0, 2.0, 1.5, 1.5)  # fx, fy, cx, cy: pixel (u, v) looks along ((u - 1.5) / 2, (v - 1.5) / 2, 1)
    at = np.array([[0.25, 0.25, 1.0], [0.5, 0.5, 2.0], [0.75, 0.75, 3.0],  # before, at, behind the 2 m surface
                   [-1.5, -1.5, 2.0], [1.5, 1.5, 2.0],  # on the NaN pixel, on the -inf one (under min range)
                   [10.0, 0.0, 1.0], [0.0, 0.0, -1.0]])  # outside the image, behind the camera
    assert obstacles.depth_reaches(at, depth, *k, 0.05).tolist() == [True, True, False, False, False, False, False]
    edge = np.array([[-0.76, 0.0, 1.0], [-0.74, 0.0, 1.0]])  # just past column 0 (u -0.02), just on it (u 0.02)
    assert obstacles.depth_reaches(edge, depth, *k, 0.05).tolist() == [False, True]
