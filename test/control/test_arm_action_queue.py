"""Chunk merging as LeRobot's async inference aggregates (robot_client._aggregate_action_queues): a chunk's row 0 is
the target after its observation, rows of steps the arm passed dropped (while a plan moves it, those the controller
can no longer take; an arm that stood still passed none after it stopped: the rest are put off), overlapping steps
0.3 old + 0.7 new, the rest appended; the plan runs dry into counted underruns."""

import numpy as np

from oxygen_ros.control.arm.action_queue import ActionQueue

PERIOD = 0.1


def _chunk(start: float, n: int = 10) -> np.ndarray:
    return (start + np.arange(n, dtype=float))[:, None]


def test_row_zero_is_the_next_target_and_a_still_arm_starts_from_it_when_the_controller_can_take_it():
    """The goal's first chunk: the arm stood where it was read while the model ran (0.25 s with the send lead), so
    none of the chunk's steps was played: row 0 goes first, put off to the first step the controller can take."""
    q = ActionQueue(PERIOD, 0.3)
    merge = q.merge(_chunk(0.0), observed_at=100.0, earliest=100.25)  # rows -> steps 1..10; takeable from 2.5
    assert (merge.dropped, merge.blended, merge.appended, merge.waited) == (0, 0, 10, 2)
    assert q.first == 3 and q.rows[0, 0] == 0.0 and q.time(q.first) >= 100.25
    assert q.remaining(100.25) == 10 and q.remaining(101.15) == 1 and q.remaining(101.2) == 0


def test_rows_a_moving_arm_passed_are_dropped():
    q = ActionQueue(PERIOD, 0.0)
    q.merge(_chunk(0.0), observed_at=100.0, earliest=100.05)  # steps 1..10, the arm moving through them
    merge = q.merge(_chunk(50.0), observed_at=100.3, earliest=100.55)  # rows -> steps 4..13; takeable from 6
    assert (merge.dropped, merge.blended, merge.appended, merge.waited) == (2, 5, 3, 0)
    assert q.first == 6 and q.rows[0, 0] == 52.0


def test_a_plan_run_out_before_the_chunk_came_drops_the_steps_it_played_and_puts_off_the_rest():
    """Read while the plan still moved the arm (step 3), the chunk came after the plan's last step (4): the arm
    played step 4 (its plan's target), then stood still: the chunk's rows from step 5 on start at step 8, the first
    the controller can take, as LeRobot skips only the actions up to the last one executed."""
    q = ActionQueue(PERIOD, 0.3)
    q.merge(_chunk(0.0, 4), observed_at=0.0, earliest=0.05)  # steps 1..4
    merge = q.merge(_chunk(20.0), observed_at=0.3, earliest=0.75)  # rows -> steps 4..13; takeable from 8
    assert (merge.dropped, merge.blended, merge.appended, merge.waited) == (1, 0, 9, 3)
    assert q.first == 8 and q.rows[0, 0] == 21.0 and len(q.rows) == 9


def test_after_a_hold_the_steps_played_until_it_are_passed_and_the_arm_waits_for_the_rest():
    q = ActionQueue(PERIOD, 0.3)
    q.merge(_chunk(0.0), observed_at=0.0, earliest=0.05)  # steps 1..10
    q.hold(0.42)  # braked during step 4
    read_before = q.merge(_chunk(30.0), observed_at=0.25, earliest=0.6)  # rows -> steps 3..12; takeable from 6
    assert (read_before.dropped, read_before.waited) == (2, 1) and q.first == 6 and q.rows[0, 0] == 32.0
    q.hold(0.65)
    read_after = q.merge(_chunk(60.0), observed_at=0.9, earliest=1.2)  # rows -> steps 10..19; takeable from 12
    assert (read_after.dropped, read_after.waited) == (0, 2) and q.first == 12 and q.rows[0, 0] == 60.0


def test_overlap_is_weighted_old_point_three_new_point_seven():
    q = ActionQueue(PERIOD, 0.3)
    q.merge(_chunk(0.0), observed_at=100.0, earliest=100.05)  # steps 1..10 hold 0..9
    merge = q.merge(_chunk(100.0), observed_at=100.5, earliest=100.72)  # rows -> steps 6..15; takeable from 8
    assert (merge.dropped, merge.blended, merge.appended) == (2, 3, 5)
    assert q.first == 8
    np.testing.assert_allclose(q.rows[:3, 0], [0.3 * 7 + 0.7 * 102, 0.3 * 8 + 0.7 * 103, 0.3 * 9 + 0.7 * 104])
    np.testing.assert_allclose(q.rows[3:, 0], [105, 106, 107, 108, 109])


def test_latest_only_and_a_chunk_too_late_for_any_step():
    q = ActionQueue(PERIOD, 0.0)
    q.merge(_chunk(0.0), observed_at=0.0, earliest=0.0)
    q.merge(_chunk(50.0, 3), observed_at=0.1, earliest=0.15)
    np.testing.assert_allclose(q.rows[:, 0], [50.0, 51.0, 52.0])  # blended with weight 0: the newest only
    late = q.merge(_chunk(80.0, 3), observed_at=0.1, earliest=0.5)  # steps 2..4: the plan played them
    assert (late.dropped, late.blended, late.appended, late.waited) == (3, 0, 0, 0) and q.rows[0, 0] == 50.0  # stays


def test_a_merged_plan_is_nowhere_until_it_is_told_and_a_held_one_nowhere():
    """Merged targets are not yet what the controller plays (they may be clamped, refused): no position, no speed,
    also where a plan told before had the arm; nor once the arm was told to hold."""
    q = ActionQueue(PERIOD, 0.3)
    q.merge(_chunk(0.0, 3), observed_at=0.0, earliest=0.0)  # steps 1..3
    assert q.commanded(0.15) is None and q.velocity(0.15) is None
    q.told(q.rows, np.zeros_like(q.rows), np.array([0.1, 0.2, 0.3]), 0.0, np.zeros(1), None)
    assert q.commanded(0.15) is not None
    q.merge(_chunk(5.0, 3), observed_at=0.1, earliest=0.1)  # steps 2..4
    assert q.commanded(0.15) is None and q.velocity(0.15) is None
    q.told(q.rows, np.zeros_like(q.rows), np.array([0.1, 0.2, 0.3]), 0.1, np.zeros(1), None)
    q.hold(0.2)
    assert q.commanded(0.25) is None and q.velocity(0.25) is None


def test_underruns_are_counted_once_each_time_the_plan_runs_dry():
    q = ActionQueue(PERIOD, 0.3)
    q.merge(_chunk(0.0, 4), observed_at=0.0, earliest=0.0)  # steps 1..4, the last due at 0.4 s
    assert not q.check_underrun(0.35)
    assert q.check_underrun(0.41) and q.check_underrun(0.5) and q.underruns == 1
    q.merge(_chunk(0.0, 4), observed_at=0.5, earliest=0.5)  # steps 6..9
    assert not q.check_underrun(0.6)
    assert q.check_underrun(0.95) and q.underruns == 2
    q.hold(0.95)
    assert q.remaining(1.0) == 0 and not q.check_underrun(2.0)  # a held arm is not an underrun


def _hermite_midpoint(p0, v0, p1, v1, h):
    """A cubic Hermite segment halfway through (the textbook closed form): its position and its slope."""
    return (p0 + p1) / 2 + h * (v0 - v1) / 8, 1.5 * (p1 - p0) / h - (v0 + v1) / 4


def test_the_plan_told_is_where_the_controller_plays_it():
    """Told what was sent, the plan is the controller's spline: from where the arm was to be when it was sent,
    moving as it was, to the first target, then cubic segments through the targets at their velocities; None before
    it was sent and past its end, where it holds its last target at rest."""
    queue = ActionQueue(0.1, 0.0)
    queue.merge(np.array([[1.0, 0.0], [2.0, 0.5], [2.5, 0.5]]), observed_at=10.0, earliest=10.05)  # steps 1, 2, 3
    positions, velocities = queue.rows, np.array([[8.0, 4.0], [6.0, 0.0], [0.0, 0.0]])
    queue.told(positions, velocities, np.array([0.05, 0.15, 0.25]), 10.05, np.array([0.5, 0.0]), np.array([2.0, 0.0]))
    at, slope = _hermite_midpoint(np.array([0.5, 0.0]), np.array([2.0, 0.0]), positions[0], velocities[0], 0.05)
    np.testing.assert_allclose(queue.commanded(10.075), at, atol=1e-9)  # the start segment: from where it was sent
    np.testing.assert_allclose(queue.velocity(10.075), slope, atol=1e-9)
    np.testing.assert_allclose(queue.commanded(10.1), positions[0], atol=1e-9)  # each target at its step,
    np.testing.assert_allclose(queue.velocity(10.1), velocities[0], atol=1e-9)  # at its velocity
    at, slope = _hermite_midpoint(positions[1], velocities[1], positions[2], velocities[2], 0.1)
    np.testing.assert_allclose(queue.commanded(10.25), at, atol=1e-9)
    np.testing.assert_allclose(queue.velocity(10.25), slope, atol=1e-9)
    np.testing.assert_allclose(queue.commanded(10.3), positions[2], atol=1e-9)
    np.testing.assert_allclose(queue.velocity(10.3), [0.0, 0.0], atol=1e-9)
    assert queue.commanded(10.04) is None and queue.velocity(10.31) is None


def test_a_last_target_reached_later_is_approached_that_much_slower_and_runs_dry_then():
    """The stop a plan ends with may be given more time than a step (safety's stretch): where the plan has the arm,
    how fast, and when it runs dry follow the time the arm was told, until the next chunk merges on the grid."""
    queue = ActionQueue(0.1, 0.3)
    queue.merge(np.array([[0.0], [1.0], [2.0]]), observed_at=10.0, earliest=10.0)  # steps 1..3 at 10.1, 10.2, 10.3
    velocities = np.array([[0.0], [5.0], [0.0]])
    queue.told(queue.rows, velocities, np.array([0.1, 0.2, 0.6]), 10.0, queue.rows[0], None)  # the last 0.4 s
    at, slope = _hermite_midpoint(1.0, 5.0, 2.0, 0.0, 0.4)
    np.testing.assert_allclose(queue.commanded(10.4), [at])
    np.testing.assert_allclose(queue.velocity(10.4), [slope])
    np.testing.assert_allclose(queue.commanded(10.6), [2.0])
    assert queue.commanded(10.65) is None and queue.end == 10.6
    assert queue.remaining(10.25) == 1  # by its step: the next chunk is asked for as early as ever
    assert not queue.check_underrun(10.45) and queue.check_underrun(10.6) and queue.underruns == 1
    queue.merge(np.array([[5.0], [6.0]]), observed_at=10.4, earliest=10.4)  # steps 5, 6 on the grid again
    assert queue.end == queue.time(6)


def test_a_lone_target_whose_stop_was_given_more_time_is_approached_until_then():
    """A plan of one target is its own closing stop: when its time was stretched, the plan reaches it then, not at
    its step, and holds it there until the plan ends."""
    queue = ActionQueue(0.1, 0.0)
    queue.merge(np.array([[1.0]]), observed_at=10.0, earliest=10.05)  # step 1, at 10.1
    queue.told(queue.rows, np.zeros((1, 1)), np.array([0.4]), 10.0, np.array([0.0]), None)
    np.testing.assert_allclose(queue.commanded(10.2), [0.5])  # halfway through 0.4 s, not past its step
    np.testing.assert_allclose(queue.velocity(10.2), [1.5 * 1.0 / 0.4])  # a cubic from rest to rest peaks at 1.5x
    np.testing.assert_allclose(queue.commanded(10.4), [1.0])
    np.testing.assert_allclose(queue.velocity(10.4), [0.0])
    assert queue.commanded(10.45) is None and queue.end == 10.4
