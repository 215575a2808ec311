"""Chunk merging as LeRobot's async inference aggregates (robot_client._aggregate_action_queues): a chunk's row 0 is
the target after its observation, rows the controller can no longer take dropped, overlapping steps 0.3 old +
0.7 new, the rest appended; the plan runs dry into counted underruns."""

import numpy as np

from oxygen_ros.control.arm.action_queue import ActionQueue

PERIOD = 0.1


def _chunk(start: float, n: int = 10) -> np.ndarray:
    return (start + np.arange(n, dtype=float))[:, None]


def test_row_zero_is_the_next_target_and_what_is_too_soon_is_dropped():
    q = ActionQueue(PERIOD, 0.3)
    merge = q.merge(_chunk(0.0), observed_at=100.0, earliest=100.25)  # rows -> steps 1..10; takeable from 2.5
    assert (merge.dropped, merge.blended, merge.appended) == (2, 0, 8)
    assert q.first == 3 and q.rows[0, 0] == 2.0 and q.time(q.first) >= 100.25
    assert q.remaining(100.25) == 8 and q.remaining(100.95) == 1 and q.remaining(101.0) == 0


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
    late = q.merge(_chunk(80.0, 3), observed_at=0.1, earliest=0.5)
    assert (late.dropped, late.blended, late.appended) == (3, 0, 0) and q.rows[0, 0] == 50.0  # the plan stays


def test_the_commanded_position_between_targets():
    q = ActionQueue(PERIOD, 0.3)
    q.merge(_chunk(0.0), observed_at=0.0, earliest=0.0)  # step k (at 0.1 k s) holds k - 1
    np.testing.assert_allclose(q.commanded(0.15), [0.5])
    np.testing.assert_allclose(q.commanded(1.0), [9.0])
    assert q.commanded(0.05) is None and q.commanded(1.05) is None


def test_underruns_are_counted_once_each_time_the_plan_runs_dry():
    q = ActionQueue(PERIOD, 0.3)
    q.merge(_chunk(0.0, 4), observed_at=0.0, earliest=0.0)  # steps 1..4, the last due at 0.4 s
    assert not q.check_underrun(0.35)
    assert q.check_underrun(0.41) and q.check_underrun(0.5) and q.underruns == 1
    q.merge(_chunk(0.0, 4), observed_at=0.5, earliest=0.5)  # steps 6..9
    assert not q.check_underrun(0.6)
    assert q.check_underrun(0.95) and q.underruns == 2
    q.hold()
    assert q.remaining(1.0) == 0 and not q.check_underrun(2.0)  # a held arm is not an underrun


def test_the_plans_velocity_is_its_slope_where_it_has_the_arm():
    """As ``commanded`` moves the arm (straight between targets), so fast: the slope of the step around ``t``; None
    outside the plan."""
    queue = ActionQueue(0.1, 0.3)
    queue.merge(np.array([[0.0, 1.0], [0.2, 1.0], [0.3, 0.5]]), observed_at=10.0, earliest=10.0)
    np.testing.assert_allclose(queue.velocity(10.15), [2.0, 0.0])
    np.testing.assert_allclose(queue.velocity(10.25), [1.0, -5.0])
    assert queue.velocity(9.0) is None and queue.velocity(10.5) is None


def test_a_last_target_reached_later_is_approached_that_much_slower_and_runs_dry_then():
    """The stop a plan ends with may be given more time than a step (safety's stretch): where the plan has the arm,
    how fast, and when it runs dry follow the time the arm was told, until the next chunk merges on the grid."""
    queue = ActionQueue(0.1, 0.3)
    queue.merge(np.array([[0.0], [1.0], [2.0]]), observed_at=10.0, earliest=10.0)  # steps 1..3 at 10.1, 10.2, 10.3
    queue.told(queue.rows, end=10.6, start=(10.1, queue.rows[0]))  # the last segment takes 0.4 s instead of 0.1 s
    np.testing.assert_allclose(queue.commanded(10.15), [0.5])
    np.testing.assert_allclose(queue.commanded(10.4), [1.5])
    np.testing.assert_allclose(queue.velocity(10.4), [2.5])
    np.testing.assert_allclose(queue.commanded(10.6), [2.0])
    assert queue.commanded(10.65) is None
    assert not queue.check_underrun(10.45) and queue.check_underrun(10.6) and queue.underruns == 1
    queue.merge(np.array([[5.0], [6.0]]), observed_at=10.4, earliest=10.4)  # steps 5, 6 on the grid again
    assert queue.end == queue.time(6)
    np.testing.assert_allclose(queue.commanded(10.55), [5.5])


def test_between_sending_a_plan_and_its_first_target_the_arm_moves_from_where_it_started():
    """A chunk's first kept target is due at least send_lead_s after it is sent; meanwhile the plan has the arm on
    its way there from where it started (the old plan's position, or the measured one), so a chunk arriving then is
    checked as moving and the arm's tracking is watched; before the plan was sent, or with a new merge not yet
    told, there is no plan there."""
    queue = ActionQueue(0.1, 0.0)
    queue.merge(np.array([[1.0], [1.5], [2.0]]), observed_at=10.0, earliest=10.2)  # steps 2, 3 (the first dropped)
    assert queue.first == 2 and queue.commanded(10.1) is None
    queue.told(queue.rows, end=queue.time(3), start=(10.05, np.array([0.5])))
    np.testing.assert_allclose(queue.commanded(10.125), [1.0])  # halfway from 0.5 (at 10.05) to 1.5 (at 10.2)
    np.testing.assert_allclose(queue.velocity(10.125), [1.0 / 0.15])
    np.testing.assert_allclose(queue.commanded(10.2), [1.5])
    assert queue.commanded(10.0) is None  # before it was sent
    queue.merge(np.array([[3.0], [3.5]]), observed_at=10.2, earliest=10.45)  # steps 5, 6: no start until told
    assert queue.commanded(10.4) is None


def test_a_lone_target_whose_stop_was_given_more_time_is_approached_until_then():
    """A plan of one target is its own closing stop: when its time was stretched, the plan reaches it then, not at
    its step, and holds it there."""
    queue = ActionQueue(0.1, 0.0)
    queue.merge(np.array([[1.0]]), observed_at=10.0, earliest=10.05)  # step 1, at 10.1
    queue.told(queue.rows, end=10.4, start=(10.0, np.array([0.0])))
    np.testing.assert_allclose(queue.commanded(10.2), [0.5])  # halfway through 0.4 s, not past its step
    np.testing.assert_allclose(queue.velocity(10.2), [2.5])
    np.testing.assert_allclose(queue.commanded(10.4), [1.0])
    np.testing.assert_allclose(queue.velocity(10.4), [0.0])
    assert queue.commanded(10.45) is None
