"""The arm controller reaches the named object, grasps it and lifts it; the target is grounded in the detections by
colour first, then shape, and the chunks respect the speed limit whatever the horizon."""

import numpy as np

from oxygen_ros.control import reach
from oxygen_ros.perception.detect import DetectedObject


def _obj(colour: str, shape: str, ahead: float | None = 40.0, left: float | None = 10.0) -> DetectedObject:
    return DetectedObject(colour, shape, 0.0, 0.0, 15.0, ahead, left)


def test_find_target_prefers_colour_then_shape_then_the_next_text():
    objects = [_obj("blue", "circle"), _obj("red", "star"), _obj("red", "square")]
    assert reach.find_target(["pick up the red square"], objects) is objects[2]
    assert reach.find_target(["pick up the red cup"], objects) is objects[1]  # colour wins, the first red
    assert reach.find_target(["grab the circle"], objects) is objects[0]
    assert reach.find_target(["tidy up", "The blue circle is on the left."], objects) is objects[0]
    assert reach.find_target(["bring the green star"], objects) is objects[1]  # shape only
    assert reach.find_target(["bring the yellow box"], objects) is None
    assert reach.find_target(["the red star"], [_obj("red", "star", None, None)]) is None  # robot not in view


def test_reaches_grasps_and_lifts_within_the_speed_limit():
    dt, target, arm = 0.1, (0.5, -0.2), reach.Arm()
    positions, phases = [arm.position], []
    for _ in range(60):
        arm = reach.step(arm, target, dt)
        positions.append(arm.position)
        phases.append(arm.phase)
    steps = np.linalg.norm(np.diff(np.asarray(positions), axis=0), axis=1)
    assert steps.max() <= reach.SPEED_MPS * dt + 1e-9
    assert [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p] == list(reach.PHASES)
    assert arm.phase == "hold" and arm.gripper == 0.0
    assert np.allclose(arm.position, (*target, reach.HOVER_Z))


def test_chunk_is_the_next_waypoints_and_advances_one_step():
    arm, target = reach.Arm(), (0.6, 0.1)
    rows, after = reach.chunk(arm, target, horizon=10, dt=0.1)
    assert rows.shape == (10, 4) and rows.dtype == np.float32
    assert np.allclose(rows[0], after.row())
    assert np.allclose(rows[1], reach.step(after, target, 0.1).row())
    held, same = reach.chunk(arm, None, horizon=5, dt=0.1)
    assert same == arm and np.allclose(held, np.tile(arm.row(), (5, 1)))
