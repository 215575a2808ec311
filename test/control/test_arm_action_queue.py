"""Chunk merging as LeRobot's async inference aggregates (robot_client._aggregate_action_queues): executed steps
dropped, overlapping steps 0.3 old + 0.7 new, the rest appended; the plan runs dry into counted underruns."""

import numpy as np

from oxygen_ros.control.arm.action_queue import ActionQueue

PERIOD = 0.1


def _chunk(start: float, n: int = 10) -> np.ndarray:
    return (start + np.arange(n, dtype=float))[:, None]


def test_first_chunk_drops_what_is_already_due():
    q = ActionQueue(PERIOD, 0.3)
    merge = q.merge(_chunk(0.0), observed_at=100.0, now=100.25)  # computed at step 0, arrives in step 2
    assert (merge.dropped, merge.blended, merge.appended) == (3, 0, 7)  # steps 0..2 gone, 3 is the first sent
    assert q.first == 3 and q.rows[0, 0] == 3.0
    assert q.remaining(100.25) == 7 and q.remaining(100.95) == 0


def test_overlap_is_weighted_old_point_three_new_point_seven():
    q = ActionQueue(PERIOD, 0.3)
    q.merge(_chunk(0.0), observed_at=100.0, now=100.05)  # steps 1..9 planned
    merge = q.merge(_chunk(100.0), observed_at=100.5, now=100.72)  # from step 5; now step 7 -> keep from 8
    assert (merge.dropped, merge.blended, merge.appended) == (3, 2, 5)
    assert q.first == 8
    np.testing.assert_allclose(q.rows[:2, 0], [0.3 * 8 + 0.7 * 103, 0.3 * 9 + 0.7 * 104])
    np.testing.assert_allclose(q.rows[2:, 0], [105, 106, 107, 108, 109])


def test_latest_only_and_a_chunk_too_late_for_any_step():
    q = ActionQueue(PERIOD, 0.0)
    q.merge(_chunk(0.0), observed_at=0.0, now=0.0)
    q.merge(_chunk(50.0, 3), observed_at=0.1, now=0.15)
    np.testing.assert_allclose(q.rows[:, 0], [51.0, 52.0])  # blended with weight 0: the newest only
    late = q.merge(_chunk(80.0, 3), observed_at=0.1, now=0.5)
    assert (late.dropped, late.blended, late.appended) == (3, 0, 0) and q.rows[0, 0] == 51.0  # the plan stays


def test_underruns_are_counted_once_each_time_the_plan_runs_dry():
    q = ActionQueue(PERIOD, 0.3)
    q.merge(_chunk(0.0, 4), observed_at=0.0, now=0.0)  # steps 1..3, the last due at 0.3 s
    assert not q.check_underrun(0.25)
    assert q.check_underrun(0.31) and q.check_underrun(0.5) and q.underruns == 1
    q.merge(_chunk(0.0, 4), observed_at=0.5, now=0.5)
    assert not q.check_underrun(0.6)
    assert q.check_underrun(0.85) and q.underruns == 2
