"""Trajectory playback as joint_trajectory_controller does it: straight from the state at acceptance to the first point,
then point to point, holding the last (cubic segments where the points carry velocities, from the moving state);
positions mapped to the controller's order by name; and each of JTC's rules for refusing a trajectory (plus ours: size
caps, a joint named twice, a non-finite position), with its reason."""

import math

import numpy as np
import pytest

from oxygen_ros.bounds import PREVIEW_CHARS
from oxygen_ros.control.trajectory_playback import MAX_JOINTS, MAX_POINTS, Point, Trajectory, oversized, rejection

JOINTS = ("a", "b", "c")
NOW = 1000.0


def points(*rows: tuple[float, list[float]]) -> list[Point]:
    return [Point(t, p) for t, p in rows]


def play(rows: list[Point], names=JOINTS, stamp: float = 0.0, current=(0.0, 0.0, 0.0)) -> Trajectory:
    assert rejection(JOINTS, names, rows, stamp, NOW) is None
    return Trajectory.accepted(JOINTS, names, rows, stamp, NOW, np.array(current))


def test_moves_straight_from_where_it_was_to_the_first_point_then_between_points_and_holds_the_last():
    trajectory = play(points((1.0, [1.0, 2.0, 3.0]), (3.0, [3.0, 2.0, 1.0])), current=(1.0, 0.0, -1.0))
    assert np.allclose(trajectory.sample(NOW), [1.0, 0.0, -1.0])
    assert np.allclose(trajectory.sample(NOW + 0.5), [1.0, 1.0, 1.0])
    assert np.allclose(trajectory.sample(NOW + 1.0), [1.0, 2.0, 3.0])
    assert np.allclose(trajectory.sample(NOW + 2.0), [2.0, 2.0, 2.0])
    assert np.allclose(trajectory.sample(NOW + 3.0), [3.0, 2.0, 1.0])
    assert np.allclose(trajectory.sample(NOW + 100.0), [3.0, 2.0, 1.0])
    assert np.allclose(trajectory.sample(NOW - 5.0), [1.0, 0.0, -1.0])  # before acceptance: where it was
    assert trajectory.end_s == NOW + 3.0


def test_feedback_index_is_the_point_moved_towards_and_done_once_the_last_time_passed():
    trajectory = play(points((1.0, [1.0] * 3), (2.0, [2.0] * 3)))
    assert [trajectory.index(NOW + t) for t in (0.0, 0.99, 1.0, 1.5, 2.0, 5.0)] == [0, 0, 1, 1, 2, 2]
    assert not trajectory.done(NOW + 1.99) and trajectory.done(NOW + 2.0)


def test_positions_are_mapped_to_the_controllers_order_by_name():
    trajectory = play(points((1.0, [3.0, 1.0, 2.0])), names=("c", "a", "b"))
    assert np.allclose(trajectory.sample(NOW + 1.0), [1.0, 2.0, 3.0])


def test_a_stamp_in_the_future_starts_there_and_the_arm_moves_from_acceptance_to_the_first_point():
    trajectory = play(points((1.0, [2.0] * 3)), stamp=NOW + 1.0)
    assert trajectory.start_s == NOW + 1.0
    assert np.allclose(trajectory.sample(NOW + 1.0), [1.0] * 3)  # halfway from acceptance (NOW) to NOW + 2
    assert np.allclose(trajectory.sample(NOW + 2.0), [2.0] * 3)


def test_a_first_point_at_time_zero_is_reached_at_once_as_jtc_does():
    trajectory = play(points((0.0, [1.0] * 3), (1.0, [2.0] * 3)))
    assert np.allclose(trajectory.sample(NOW), [1.0] * 3)
    assert np.allclose(trajectory.sample(NOW + 0.5), [1.5] * 3)


def test_hold_stays_put_from_now_and_is_done_at_once():
    here = np.array([0.1, 0.2, 0.3])
    trajectory = Trajectory.hold(here, NOW)
    here[0] = 9.0  # a copy was kept
    assert np.allclose(trajectory.sample(NOW + 10.0), [0.1, 0.2, 0.3]) and trajectory.done(NOW)


def test_a_valid_trajectory_with_zero_end_velocities_and_accelerations_is_accepted():
    rows = [Point(0.5, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0] * 3), Point(1.0, [1.0, 1.0, 1.0], [0.0] * 3)]
    assert rejection(JOINTS, JOINTS, rows, 0.0, NOW) is None
    assert rejection(JOINTS, JOINTS, rows, NOW - 0.5, NOW) is None  # ends now: not yet in the past


GOOD = [Point(1.0, [0.0, 0.0, 0.0])]
REFUSED = {
    "too many joints": (["j"] * (MAX_JOINTS + 1), GOOD, 0.0, f"names {MAX_JOINTS + 1} joints, more than the bound"),
    "too many points": (JOINTS, [Point(float(i + 1), [0.0] * 3) for i in range(MAX_POINTS + 1)], 0.0,
                        f"has {MAX_POINTS + 1} points, more than the bound of {MAX_POINTS}"),
    "a joint missing": (("a", "b"), [Point(1.0, [0.0, 0.0])], 0.0,
                        "don't match the controller joints: 2 named, the controller has 3 (a, b, c)"),
    "no names": ((), [Point(1.0, [])], 0.0, "Joints on incoming trajectory don't match the controller joints"),
    "no points": (JOINTS, [], 0.0, "Empty trajectory received."),
    "an unknown joint": (("a", "b", "elbow"), GOOD, 0.0, "Incoming joint 'elbow' doesn't match the controller's"),
    "an empty name": (("a", "b", ""), GOOD, 0.0, "Incoming joint '' doesn't match the controller's joints."),
    "a joint twice": (("a", "b", "a"), GOOD, 0.0, "Incoming joint 'a' is named twice."),
    "equal times": (JOINTS, points((1.0, [0.0] * 3), (1.0, [1.0] * 3)), 0.0,
                    "Time between points 0 and 1 is not strictly increasing, it is 1.000000 and 1.000000 respectively"),
    "decreasing times": (JOINTS, points((1.0, [0.0] * 3), (2.0, [0.0] * 3), (1.5, [1.0] * 3)), 0.0,
                         "Time between points 1 and 2 is not strictly increasing"),
    "short positions": (JOINTS, points((1.0, [0.0] * 3), (2.0, [0.0] * 2)), 0.0,
                        "Mismatch between joint_names size (3) and positions (2) at point #1."),
    "no positions": (JOINTS, points((1.0, [])), 0.0, "joint_names size (3) and positions (0) at point #0."),
    "long velocities": (JOINTS, [Point(1.0, [0.0] * 3, [0.0] * 4)], 0.0,
                        "Mismatch between joint_names size (3) and velocities (4) at point #0."),
    "short accelerations": (JOINTS, [Point(1.0, [0.0] * 3, [], [0.0])], 0.0,
                            "Mismatch between joint_names size (3) and accelerations (1) at point #0."),
    "effort": (JOINTS, [Point(1.0, [0.0] * 3, effort=[0.0] * 3)], 0.0,
               "Trajectories with effort fields are only supported for controllers using the 'effort' command"),
    "a NaN position": (JOINTS, points((1.0, [0.0, math.nan, 0.0])), 0.0,
                       "Position of joint b at point #0 is not finite: nan"),
    "an infinite position": (JOINTS, points((1.0, [0.0] * 3), (2.0, [0.0, 0.0, -math.inf])), 0.0,
                             "Position of joint c at point #1 is not finite: -inf"),
    "a moving end": (JOINTS, [Point(1.0, [0.0] * 3, [0.0, 0.01, 0.0])], 0.0,
                     "Velocity of last trajectory point of joint b is not zero: 0.010000000000000"),
    "ends in the past": (JOINTS, points((1.0, [0.0] * 3), (2.0, [0.0] * 3)), NOW - 2.5,
                         "with non-zero start time (997.500000) that ends in the past (999.500000)"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSED))
def test_each_rule_refuses_with_its_reason(case):
    names, rows, stamp, reason = REFUSED[case]
    assert reason in (rejection(JOINTS, names, rows, stamp, NOW) or "")


def test_an_over_long_unknown_name_is_cut_short_in_the_reason():
    reason = rejection(JOINTS, ("a", "b", "x" * 100_000), GOOD, 0.0, NOW)
    assert reason == f"Incoming joint {'x' * PREVIEW_CHARS!r}... doesn't match the controller's joints."


def test_a_tiny_end_velocity_is_zero_as_for_jtc():
    assert rejection(JOINTS, JOINTS, [Point(1.0, [0.0] * 3, [1e-9] * 3)], 0.0, NOW) is None


def test_size_caps_are_checked_on_counts_alone():
    assert oversized(MAX_JOINTS, MAX_POINTS) is None
    assert "joints" in oversized(MAX_JOINTS + 1, 1) and "points" in oversized(1, MAX_POINTS + 1)


def _cubic_through(t0: float, p0: float, v0: float, t1: float, p1: float, v1: float) -> np.poly1d:
    """The cubic with these ends (positions and slopes), solved from its four conditions: the reference."""
    rows = [[t**3, t**2, t, 1.0] for t in (t0, t1)] + [[3 * t**2, 2 * t, 1.0, 0.0] for t in (t0, t1)]
    return np.poly1d(np.linalg.solve(np.array(rows), np.array([p0, p1, v0, v1])))


def test_a_controller_without_a_velocity_state_plays_its_first_segment_straight():
    """JTC's interpolate_between_points with a start state whose velocity it cannot read (state_interfaces without
    velocity): a straight line to the first point, at one speed from the start, however the arm moved; the segments
    after it are cubic as before."""
    rows = [Point(1.0, [1.0, 0.0, 0.0], [0.5, 0.0, 0.0]), Point(2.0, [2.0, 0.0, 0.0], [0.0, 0.0, 0.0])]
    trajectory = Trajectory.accepted(JOINTS, JOINTS, rows, 0.0, NOW, np.zeros(3), np.array([2.0, 0.0, 0.0]),
                                     reads_velocity=False)  # fmt: skip
    for t in (0.2, 0.5, 0.9):
        assert trajectory.sample(NOW + t)[0] == pytest.approx(t, abs=1e-12)
        assert trajectory.velocity(NOW + t)[0] == pytest.approx(1.0, abs=1e-12)  # not the 2.0 it moved at
    second = _cubic_through(1.0, 1.0, 0.5, 2.0, 2.0, 0.0)
    assert trajectory.sample(NOW + 1.5)[0] == pytest.approx(second(1.5), abs=1e-12)


def test_points_with_velocities_play_cubic_segments_from_the_moving_state():
    """JTC's spline with positions and velocities: cubic segments, the first from the state at acceptance, its
    velocity included; the slope is continuous where a segment meets the next, and 0 once the last point is held."""
    rows = [Point(1.0, [1.0, 0.0, 0.0], [0.5, 0.0, 0.0]), Point(2.0, [2.0, 0.0, 0.0], [0.0, 0.0, 0.0])]
    trajectory = Trajectory.accepted(JOINTS, JOINTS, rows, 0.0, NOW, np.zeros(3), np.array([2.0, 0.0, 0.0]))
    first, second = _cubic_through(0.0, 0.0, 2.0, 1.0, 1.0, 0.5), _cubic_through(1.0, 1.0, 0.5, 2.0, 2.0, 0.0)
    for t in (0.0, 0.3, 0.7, 1.0, 1.4, 1.9, 2.0):
        cubic = first if t <= 1.0 else second
        assert trajectory.sample(NOW + t)[0] == pytest.approx(cubic(t), abs=1e-12)
        assert trajectory.velocity(NOW + t)[0] == pytest.approx(cubic.deriv()(t), abs=1e-9)
    assert trajectory.velocity(NOW + 1e-9)[0] == pytest.approx(2.0, abs=1e-6)  # leaves moving as the arm was
    assert trajectory.velocity(NOW + 5.0)[0] == 0.0 and trajectory.sample(NOW + 5.0)[0] == 2.0
    positions_only = play(points((1.0, [1.0, 0.0, 0.0])))  # no velocities: straight, whatever the state's motion
    assert positions_only.sample(NOW + 0.5)[0] == pytest.approx(0.5)
