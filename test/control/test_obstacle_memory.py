"""The built-in driver's obstacle memory (``control.obstacle_memory``) on hand-placed points: a reading's points are
kept where odometry puts them, a later reading's rays clear what they reach, the rest is forgotten by age, by
distance from the robot, when time goes back or the odometry restarts, or when asked (all but the newest reading's);
the nearest MAX_POINTS are kept."""

import numpy as np

from oxygen_ros.control import obstacle_memory
from oxygen_ros.control.obstacle_memory import ObstacleMemory

S = 1_000_000_000


def nothing(at: np.ndarray) -> np.ndarray:
    return np.zeros(len(at), dtype=bool)


def everything(at: np.ndarray) -> np.ndarray:
    return np.ones(len(at), dtype=bool)


def test_points_stay_where_odometry_puts_them_until_a_ray_reaches_them():
    memory = ObstacleMemory()
    memory.add(np.array([[1.0, 0.0, 0.5]]), (0.0, 0.0, 0.0), S, nothing, keep_s=30.0, reach_m=5.0)
    memory.add(np.zeros((0, 3)), (0.5, 0.0, 0.0), 2 * S, nothing, keep_s=30.0, reach_m=5.0)  # drove 0.5 m
    np.testing.assert_allclose(memory.around((0.5, 0.0, np.pi / 2)), [[0.0, -0.5, 0.5]], atol=1e-12)  # turned left
    memory.add(np.zeros((0, 3)), (0.5, 0.0, 0.0), 3 * S, everything, keep_s=30.0, reach_m=5.0)
    assert len(memory) == 0


def test_points_are_forgotten_by_age_by_distance_and_when_time_goes_back():
    memory = ObstacleMemory()
    memory.add(np.array([[1.0, 0.0, 0.0], [4.0, 0.0, 0.0]]), (0.0, 0.0, 0.0), S, nothing, keep_s=2.0, reach_m=5.0)
    memory.add(np.array([[1.0, 1.0, 0.0]]), (0.0, 0.0, 0.0), 2 * S, nothing, keep_s=2.0, reach_m=5.0)
    assert len(memory) == 3
    memory.add(np.zeros((0, 3)), (-2.0, 0.0, 0.0), 3 * S, nothing, keep_s=2.0, reach_m=5.0)  # 6 m from (4, 0)
    np.testing.assert_allclose(sorted(memory.around((0.0, 0.0, 0.0)).tolist()), [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    memory.add(np.zeros((0, 3)), (0.0, 0.0, 0.0), 3 * S + 1, nothing, keep_s=2.0, reach_m=5.0)  # over 2 s since 1 s
    np.testing.assert_allclose(memory.around((0.0, 0.0, 0.0)), [[1.0, 1.0, 0.0]])
    memory.add(np.array([[0.5, 0.0, 0.0], [9.0, 0.0, 0.0]]), (0.0, 0.0, 0.0), S, nothing, keep_s=2.0, reach_m=5.0)
    # a bag restarted: afresh (the newest reading whole: the reach is measured from where the robot is next)
    np.testing.assert_allclose(memory.around((0.0, 0.0, 0.0)), [[0.5, 0.0, 0.0], [9.0, 0.0, 0.0]])
    memory.add(np.zeros((0, 3)), (0.0, 0.0, 0.0), S + 1, nothing, keep_s=2.0, reach_m=5.0, epoch=1)
    assert len(memory) == 0  # the odometry restarted: what it placed is nowhere now


def test_the_nearest_points_are_kept():
    memory = ObstacleMemory()
    far = np.column_stack([np.linspace(1.0, 2.0, obstacle_memory.MAX_POINTS), np.zeros((obstacle_memory.MAX_POINTS, 2))])
    memory.add(far, (0.0, 0.0, 0.0), S, nothing, keep_s=30.0, reach_m=5.0)
    memory.add(np.array([[0.5, 0.0, 0.0]]), (0.0, 0.0, 0.0), 2 * S, nothing, keep_s=30.0, reach_m=5.0)
    kept = memory.around((0.0, 0.0, 0.0))
    assert len(kept) == obstacle_memory.MAX_POINTS and kept[:, 0].min() == 0.5 and kept[:, 0].max() < 2.0


def test_forget_keeps_only_what_the_newest_reading_saw():
    memory = ObstacleMemory()
    assert memory.forget() == 0  # nothing yet
    memory.add(np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]), (0.0, 0.0, 0.0), S, nothing, keep_s=30.0, reach_m=5.0)
    memory.add(np.array([[2.0, 0.0, 0.0]]), (0.0, 0.0, 0.0), 2 * S, nothing, keep_s=30.0, reach_m=5.0)
    assert memory.forget() == 2
    np.testing.assert_allclose(memory.around((0.0, 0.0, 0.0)), [[2.0, 0.0, 0.0]])  # seen now: it still stops the base
    memory.add(np.zeros((0, 3)), (0.0, 0.0, 0.0), 3 * S, nothing, keep_s=30.0, reach_m=5.0)
    assert memory.forget() == 1 and len(memory) == 0
