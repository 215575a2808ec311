"""The state instruction_node sends with a chunk request: state_joint_names' positions and, named LeRobot's way
(`<joint>.vel`), velocities, an action joint's in the model's units (position: minus the offset, over the scale;
velocity: over the scale), read from real JointState messages; a velocity the driver does not publish is
FAILED_PRECONDITION naming the entry, never a zero."""

import math
import time
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from arm_harness import arm_io_for
from control_msgs.action import FollowJointTrajectory
from control_msgs.msg import JointTrajectoryControllerState
from rclpy.node import Node
from rclpy.serialization import serialize_message
from rclpy.task import Future
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Header
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from oxygen_ros.control.arm.action_queue import ActionQueue
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes import trajectory_controller
from oxygen_ros.nodes.arm_io import ArmIO
from oxygen_ros.nodes.controller_command import MOVING_AGE_S, ControllerCommand
from oxygen_ros.nodes.stamps import seconds
from oxygen_ros.nodes.vla_arm import ArmPlan, VlaArm


def _cubic(start: float, end: float, start_velocity: float, duration: float) -> np.ndarray:
    """The coefficients [4] of the cubic a joint_trajectory_controller plays from (start, start_velocity) to ``end``
    at rest ``duration`` later, solved from those four end conditions."""
    system = np.array([[1, 0, 0, 0], [1, duration, duration**2, duration**3], [0, 1, 0, 0],
                       [0, 1, 2 * duration, 3 * duration**2]])  # fmt: skip
    return np.linalg.solve(system, [start, end, start_velocity, 0.0])


def _end_accelerations(c: np.ndarray, duration: float) -> np.ndarray:
    """The cubic's acceleration at its start and its end (it is linear in time: the hardest is at one of them)."""
    return np.array([2 * c[2], 2 * c[2] + 6 * c[3] * duration])


def _arm(node: Node, settings: dict | None = None, **lists) -> ArmIO:
    return arm_io_for(node, {"gripper_max_effort": 10.0} | (settings or {}), **lists)


@pytest.mark.parametrize(("accelerations", "unset"), [
    ([], ("shoulder", "elbow")),  # the default: a URDF has none
    ([math.nan, 4.0, 2.0], ("shoulder",)),
    ([math.inf, math.nan, 2.0], ()),  # .inf waives the shoulder; the jaw's own controller moves it: never asked
    ([1.0, 2.0], ("shoulder", "elbow")),  # a wrong count: refused with the limits themselves (joint_limits)
])  # fmt: skip
def test_the_trajectory_joints_without_an_acceleration_limit_are_known(ros_context, accelerations, unset):
    """What a VLA goal is refused for (VlaArm.plan_for names them): a trajectory joint whose joint_acceleration_limits
    entry is missing or NaN; a jaw on its own gripper controller is no trajectory joint."""
    node = Node("arm_acceleration_unset_test", context=ros_context)
    try:
        arm = _arm(node, action_joint_names=["shoulder", "jaw", "elbow"], gripper_joint_names=["jaw"],
                   joint_acceleration_limits=accelerations)  # fmt: skip
        assert arm.acceleration_unset == unset
    finally:
        node.destroy_node()


def test_a_controller_without_velocity_state_takes_no_acceleration_limit(ros_context):
    """measured_at_rest: the joint_trajectory_controller plays each trajectory's first segment as a straight line from
    the measured position (a step in velocity no acceleration limit holds): a finite joint_acceleration_limits is
    refused at start naming the remedy; .inf (waived) is taken."""
    node = Node("arm_at_rest_acceleration_test", context=ros_context)
    try:
        with pytest.raises(ValueError, match=r"bounds \['wrist'\], but controller_starts_from is measured_at_rest: .* "
                           r"interpolate_from_desired_state .* controller_starts_from: commanded, or waive"):
            _arm(node, {"controller_starts_from": "measured_at_rest"}, action_joint_names=["wrist"],
                 joint_acceleration_limits=[2.0])  # fmt: skip
        arm = _arm(node, {"controller_starts_from": "measured_at_rest"}, action_joint_names=["wrist"],
                   joint_acceleration_limits=[math.inf])  # fmt: skip
        assert arm.acceleration_unset == ()
    finally:
        node.destroy_node()


def test_positions_and_velocities_in_the_models_units(ros_context):
    node = Node("arm_state_test", context=ros_context)
    try:
        arm = _arm(node, action_joint_names=["wrist", "jaw"], action_scale=[0.5, 2.0], action_offset=[1.0, 0.0],
                   state_joint_names=["wrist.pos", "wrist.vel", "base", "base.vel", "jaw"])  # fmt: skip
        msg = JointState(name=["base", "wrist", "jaw"], position=[0.3, 2.0, 1.0], velocity=[0.1, 0.25, -4.0])
        msg.header.stamp = node.get_clock().now().to_msg()
        arm.readings._on_state(msg)
        state, origin, read_at = arm.readings.snapshot()
        # wrist: (2 - 1) / 0.5 and 0.25 / 0.5; base (no action joint): as measured; jaw: 1 / 2
        np.testing.assert_allclose(state, [2.0, 0.5, 0.3, 0.1, 0.5])
        np.testing.assert_allclose(origin, [2.0, 0.5])
        assert read_at == arm.readings._joints["wrist"][2]  # when the reading the model saw arrived, not now
        msg.velocity = []  # a driver that publishes positions only
        arm.readings._on_state(msg)
        with pytest.raises(EngineError) as err:
            arm.readings.snapshot()
        assert err.value.code == ErrorCode.FAILED_PRECONDITION and "state entry wrist.vel" in err.value.message
        for garbage in (math.nan, 1e30):  # not a number, or no speed an arm has: missing, never in the state
            msg.velocity = [0.1, garbage, 0.0]
            arm.readings._on_state(msg)
            with pytest.raises(EngineError, match="no velocity for joint wrist"):
                arm.readings.snapshot()
    finally:
        node.destroy_node()


def test_a_chunk_is_dated_by_when_the_arms_own_readings_arrived(ros_context):
    """A joint the model only reads (a torso on another driver, a slower topic) and a gripper on its own controller
    report apart from the arm: the date a chunk's plan is laid from is the oldest of the arm joints' arrivals."""
    node = Node("arm_state_date_test", context=ros_context)
    try:
        arm = _arm(node, action_joint_names=["wrist", "jaw"], gripper_joint_names=["jaw"],
                   state_joint_names=["base", "wrist", "jaw"])  # fmt: skip
        stamp = node.get_clock().now().to_msg()
        for names in (["base"], ["jaw"], ["wrist"]):  # base and the jaw arrive first
            arm.readings._on_state(JointState(header=Header(stamp=stamp), name=names, position=[0.1]))
            time.sleep(0.02)
        _, _, read_at = arm.readings.snapshot()
        joints = arm.readings._joints
        assert read_at == joints["wrist"][2] > joints["jaw"][2] > joints["base"][2]
    finally:
        node.destroy_node()


def test_a_topic_hold_stops_the_arm_even_when_its_joint_states_are_stale(ros_context):
    """On the trajectory topic nothing can be cancelled: a hold is a new one-point trajectory replacing the one
    playing. With fresh joint states it goes where asked, timed so the controller's cubic from the measured position
    peaks within the velocity limits (1.5 x the mean speed); with stale ones (or a clock gone back) it still goes where
    the plan has the arm, timed for the largest gap the plan's tracking check allowed, never leaving the old trajectory
    to play on. (Each hold here follows a trajectory sent since the last: a hold after a hold sends nothing.)"""
    node = Node("arm_hold_test", context=ros_context)
    try:
        arm = _arm(node, {"input_timeout_s": 0.5, "trajectory_topic": "arm_controller/joint_trajectory"},
                   action_joint_names=["shoulder", "elbow"], joint_lower_limits=[-3.0, -3.0],
                   joint_upper_limits=[3.0, 3.0], joint_velocity_limits=[1.0, 2.0])  # fmt: skip
        sent = []
        arm.controllers[0]._publisher = SimpleNamespace(publish=sent.append)
        warnings = []
        msg = JointState(name=["shoulder", "elbow"], position=[0.0, 0.0])
        msg.header.stamp = node.get_clock().now().to_msg()
        arm.readings._on_state(msg)
        arm.hold(np.array([0.4, 0.2]), warnings.append)
        (point,) = sent[-1].points
        assert list(point.positions) == [0.4, 0.2] and list(point.velocities) == [0.0, 0.0]
        assert seconds(point.time_from_start) == pytest.approx(1.5 * 0.4 / 1.0)  # the shoulder's 0.4 rad at 1 rad/s
        arm.hold(None, warnings.append)  # at once again (a goal's end after its own hold): it brakes already
        assert len(sent) == 1
        arm.controllers[0]._stopping = False  # a trajectory sent since the last hold
        arm.hold(None, warnings.append)  # no plan: where it is, decelerating over HOLD_MIN_S
        assert list(sent[-1].points[0].positions) == [0.0, 0.0]
        assert seconds(sent[-1].points[0].time_from_start) == pytest.approx(trajectory_controller.HOLD_MIN_S)
        readings = arm.readings
        readings._joints = {name: (p, v, arrival - 1.0, stamp)
                            for name, (p, v, arrival, stamp) in readings._joints.items()}
        arm.controllers[0]._stopping = False  # a trajectory sent since the last hold
        arm.hold(np.array([0.4, 0.2]), warnings.append)
        assert list(sent[-1].points[0].positions) == [0.4, 0.2]
        assert seconds(sent[-1].points[0].time_from_start) == pytest.approx(1.5 * 0.3 / 1.0)
        assert "where the plan has the arm" in warnings[-1] and "old, over input_timeout_s" in warnings[-1]
        count = len(sent)
        arm.controllers[0]._stopping = False  # a trajectory sent since the last hold
        arm.hold(None, warnings.append)  # stale and no plan: nowhere known to hold, said
        assert len(sent) == count and "no plan says where the arm is" in warnings[-1]
        future = {name: (p, v, arrival + 10.0, stamp) for name, (p, v, arrival, stamp) in arm.readings._joints.items()}
        arm.readings._joints = future  # arrived "after now": the node clock went back since
        with pytest.raises(EngineError, match="after now on this node's clock"):
            arm.readings.measured(arm.names)
    finally:
        node.destroy_node()


def test_the_start_state_is_the_reading_carried_forward_at_its_velocity(ros_context):
    """Where a joint_trajectory_controller taking a trajectory now starts it (its measured state): each position
    moved on by its reported velocity over the time since it arrived; a joint without a velocity as read, at rest."""
    node = Node("arm_start_state_test", context=ros_context)
    try:
        arm = _arm(node, action_joint_names=["wrist", "jaw"])
        arm.readings._on_state(JointState(name=["wrist", "jaw"], position=[0.5, 0.2], velocity=[2.0, math.nan]))
        arrival = arm.readings._joints["wrist"][2]
        arm.readings.now = lambda: arrival + 0.05  # 50 ms after it arrived
        position, velocity = arm.readings.start_state(("wrist", "jaw"))
        np.testing.assert_allclose(position, [0.6, 0.2], atol=1e-5)  # the node clock in float seconds
        np.testing.assert_allclose(velocity, [2.0, 0.0])
    finally:
        node.destroy_node()


def test_joint_states_read_while_they_arrive_are_never_newer_than_now_nor_replaced_by_older_ones(ros_context):
    """joint_states callbacks run on several executor threads at once (a UR driver publishes at 500 Hz): a reading
    whose callback took its arrival time before another's but wrote after it is dropped; a reading that arrives
    while the clock thread reads the arm is not "after now" (which ends a goal as a clock gone back)."""
    node = Node("arm_state_race_test", context=ros_context)
    try:
        arm = _arm(node, action_joint_names=["wrist"])
        clock = iter([5.0, 4.9])
        arm.readings.now = lambda: next(clock)
        arm.readings._on_state(JointState(name=["wrist"], position=[0.2], velocity=[0.0]))  # arrived at 5.0
        arm.readings._on_state(JointState(name=["wrist"], position=[0.1], velocity=[0.0]))  # took 4.9 before it: older
        assert arm.readings._joints["wrist"][:3] == (0.2, 0.0, 5.0)

        def now_as_a_reading_lands() -> float:  # another callback stores a reading while the clock is read
            arm.readings._joints["wrist"] = (0.3, 0.0, 6.0, 0.0)
            return 5.5

        arm.readings.now = now_as_a_reading_lands
        np.testing.assert_allclose(arm.readings.measured(("wrist",)), [0.2])  # the reading looked up before the clock
    finally:
        node.destroy_node()


def test_after_the_clock_went_back_new_readings_replace_the_old_ones(ros_context):
    """A simulator reset takes use_sim_time back: readings arriving then are far "older" than the stored one and
    replace it (dropping them would leave the arm unreadable until the clock caught up); by their stamps, a reading
    the driver sent before the stored one is dropped whichever arrived last."""
    node = Node("arm_state_reset_test", context=ros_context)
    try:
        arm = _arm(node, action_joint_names=["wrist"])
        clock = iter([100.0, 3.0])
        arm.readings.now = lambda: next(clock)
        arm.readings._on_state(JointState(name=["wrist"], position=[0.2], velocity=[0.0]))
        arm.readings._on_state(JointState(name=["wrist"], position=[0.0], velocity=[0.0]))  # after the reset
        assert arm.readings._joints["wrist"][:3] == (0.0, 0.0, 3.0)
        stamped = [JointState(name=["wrist"], position=[x], velocity=[0.0]) for x in (0.5, 0.4)]
        stamped[0].header.stamp.sec, stamped[1].header.stamp.sec, stamped[1].header.stamp.nanosec = 4, 3, 900_000_000
        arm.readings.now = lambda: 4.0
        for msg in stamped:  # sent at 4.0 and 3.9: the second is older, whatever the executor's threads did
            arm.readings._on_state(msg)
        assert arm.readings._joints["wrist"][0] == 0.5
    finally:
        node.destroy_node()


def test_our_trajectory_preempting_our_previous_one_is_no_fault_whichever_answer_comes_first(ros_context):
    """The controller ends our previous goal CANCELED when our next one arrives; that result may reach us before the
    next one's acceptance (which makes it the newest): while a trajectory of ours is on its way a CANCELED newest
    goal is our own preemption, and for answer_wait_s after one was given up on (taken late, it preempts all the
    same). Without one on its way, or past that, it is another client's doing (``Fault.taken_over``); an abort is a
    fault either way."""
    node = Node("arm_preempt_race_test", context=ros_context)
    try:
        arm = _arm(node, action_joint_names=["wrist"]).controllers[0]
        now = time.monotonic()
        for status, on_its_way, fault in ((GoalStatus.STATUS_CANCELED, [math.inf], None),
                                          (GoalStatus.STATUS_CANCELED, [], True),
                                          (GoalStatus.STATUS_CANCELED, [now - 1.0, now + 10.0], None),
                                          (GoalStatus.STATUS_CANCELED, [now - 1.0], True),
                                          (GoalStatus.STATUS_ABORTED, [math.inf], False)):  # fmt: skip
            handle = SimpleNamespace(goal_id=SimpleNamespace(uuid=bytes(16)))
            arm._newest, arm._live = handle, {bytes(16): handle}
            arm._unanswered = {Future(): until for until in on_its_way}
            result = FollowJointTrajectory.Result(error_code=-1, error_string="Current goal cancelled due to new "
                                                  "incoming action.")  # fmt: skip
            arm._on_result(handle, SimpleNamespace(status=status, result=result))
            taken = arm.take_fault()
            assert (taken is None) if fault is None else taken.taken_over == fault
    finally:
        node.destroy_node()


def test_on_the_topic_a_recorder_or_an_echo_is_no_controller(ros_context):
    """Fire and forget on `trajectory_topic` needs someone to play it: a rosbag2 recorder or `ros2 topic echo`
    subscribing is no controller (the goal would report chunks sent to nobody); a controller's subscription is."""
    topic = "/listener_test/joint_trajectory"
    node = Node("arm_listener_test", context=ros_context)
    watchers = [Node(name, context=ros_context) for name in ("rosbag2_recorder", "_ros2cli_4242", "arm_controller")]
    try:
        arm = _arm(node, {"trajectory_topic": topic}, action_joint_names=["wrist"])
        for count, watcher in enumerate(watchers, start=1):
            watcher.create_subscription(JointTrajectory, topic, lambda _: None, 10)
            deadline = time.monotonic() + 10.0
            while node.count_subscribers(topic) < count and time.monotonic() < deadline:
                time.sleep(0.05)
            assert node.count_subscribers(topic) == count
            assert arm.controllers[0].listening() == (watcher.get_name() == "arm_controller")
    finally:
        for each in (node, *watchers):
            each.destroy_node()


def _moving_joints(node: Node, positions: list[float], velocity: float = 1.0, upper: float = 3.0,
                   settings: dict | None = None) -> tuple[ArmIO, list]:  # fmt: skip
    """An arm on the topic whose joints read ``positions`` at ``velocity`` now (read as they arrived: nothing
    carried forward), limits 2 rad/s and 2 rad/s^2, and the trajectories it sends."""
    names, count = [f"joint_{i}" for i in range(len(positions))], len(positions)
    settings = {"trajectory_topic": "arm_controller/joint_trajectory"} | (settings or {})
    arm = _arm(node, settings, action_joint_names=names,
               joint_lower_limits=[-3.0] * count, joint_upper_limits=[upper] * count,
               joint_velocity_limits=[2.0] * count, joint_acceleration_limits=[2.0] * count)  # fmt: skip
    sent = []
    arm.controllers[0]._publisher = SimpleNamespace(publish=sent.append)
    msg = JointState(name=names, position=positions, velocity=[velocity] * count)
    msg.header.stamp = node.get_clock().now().to_msg()
    arm.readings._on_state(msg)
    arm.readings.now = lambda: arm.readings._joints[names[0]][2]
    return arm, sent


def test_a_hold_of_a_moving_arm_brakes_within_the_acceleration_limits(ros_context):
    """Where the plan moves the shoulder at 1 rad/s and the arm follows, the hold brakes at the 2 rad/s^2 limit:
    0.5 s to rest, 0.25 rad on (v T / 2), the controller's cubic from there a steady deceleration (solved here from
    its four end conditions); the elbow, at rest, stays."""
    node = Node("arm_brake_test", context=ros_context)
    try:
        arm = _arm(node, {"trajectory_topic": "arm_controller/joint_trajectory"},
                   action_joint_names=["shoulder", "elbow"], joint_lower_limits=[-3.0, -3.0],
                   joint_upper_limits=[3.0, 3.0], joint_velocity_limits=[2.0, 2.0],
                   joint_acceleration_limits=[2.0, 2.0])  # fmt: skip
        sent = []
        arm.controllers[0]._publisher = SimpleNamespace(publish=sent.append)
        msg = JointState(name=["shoulder", "elbow"], position=[0.4, 0.2], velocity=[1.0, 0.0])
        msg.header.stamp = node.get_clock().now().to_msg()
        arm.readings._on_state(msg)
        arm.readings.now = lambda: arm.readings._joints["shoulder"][2]  # read as it arrived: nothing carried forward
        arm.hold(np.array([0.4, 0.2]), print, velocity=np.array([1.0, 0.0]))
        (point,) = sent[-1].points
        np.testing.assert_allclose(point.positions, [0.65, 0.2])
        duration = seconds(point.time_from_start)
        assert duration == pytest.approx(0.5)
        c = _cubic(0.4, 0.65, 1.0, duration)
        assert c[3] == pytest.approx(0.0, abs=1e-9) and 2 * c[2] == pytest.approx(-2.0)  # constant -2 rad/s^2
    finally:
        node.destroy_node()


@pytest.mark.parametrize(("lag", "measured_velocity"), [(0.05, 1.0), (-0.05, 1.0), (0.0, 1.0), (0.02, 0.8),
                                                        (-0.02, 1.3)])  # fmt: skip
def test_a_hold_of_an_arm_off_its_plan_brakes_within_the_acceleration_limits_from_where_it_is(
        ros_context, lag, measured_velocity):  # fmt: skip
    """The controller plays the stop from the measured state: an arm ``lag`` behind (or ahead of) where the plan
    has it, or slower or faster than it, brakes over a longer time, so that the cubic through the gap stays within
    2 rad/s^2 at both ends (solved from its four end conditions); with no gap at the plan's speed it is the plain
    v / a, the limit reached."""
    node = Node("arm_brake_gap_test", context=ros_context)
    try:
        arm, sent = _moving_joints(node, [0.4 - lag], measured_velocity)
        arm.hold(np.array([0.4]), print, velocity=np.array([1.0]))
        (point,) = sent[-1].points
        duration = seconds(point.time_from_start)
        ends = _end_accelerations(_cubic(0.4 - lag, point.positions[0], measured_velocity, duration), duration)
        assert np.abs(ends).max() <= 2.0 + 1e-6, ends  # within the limit
        if lag == 0.0:
            assert np.abs(ends).max() == pytest.approx(2.0) and duration == pytest.approx(0.5)  # and no slower
        assert point.positions[0] == pytest.approx(0.4 + duration / 2)  # v T / 2 past where the plan has it
    finally:
        node.destroy_node()


def test_a_hold_is_planned_for_the_arm_where_the_controller_will_start_the_stop(ros_context):
    """A stop reaches the controller half a round trip of its recent acceptances of our goals after it is sent
    (their median: one slow answer moves nothing), and the arm moves on meanwhile: the hold is planned from 20 ms
    on, 0.42 at 1 rad/s, and brakes at the 2 rad/s^2 limit from there (planned from 0.40, the controller's cubic
    from 0.42 would brake at 2.5)."""
    node = Node("arm_lead_test", context=ros_context)
    try:
        arm, sent = _moving_joints(node, [0.4])
        arm.controllers[0]._answer_times.extend([0.04, 1.0, 0.04])
        arm.hold(np.array([0.4]), print, velocity=np.array([1.0]))
        (point,) = sent[-1].points
        duration = seconds(point.time_from_start)
        assert duration == pytest.approx(0.5) and point.positions[0] == pytest.approx(0.42 + 0.25)
        np.testing.assert_allclose(_end_accelerations(_cubic(0.42, point.positions[0], 1.0, duration), duration),
                                   [-2.0, -2.0], rtol=1e-5)  # (the duration in whole nanoseconds)  # fmt: skip
    finally:
        node.destroy_node()


@pytest.mark.parametrize("ahead", [0.0, 0.05, -0.05])
def test_a_hold_with_a_position_limit_within_its_braking_distance_stops_on_it_and_never_past(ros_context, ahead):
    """The shoulder 0.2 short of its upper limit at 1 rad/s (braking at 2 rad/s^2 takes 0.25): the gentlest stop
    that stays short of the limit is the steady deceleration that ends on it, from where the arm is measured
    (``ahead`` of where its plan has it, or behind): v^2 / 2d, over the acceleration limit as it must be; the
    controller's cubic from the measured state never passes the limit."""
    node = Node("arm_squeeze_test", context=ros_context)
    try:
        arm, sent = _moving_joints(node, [0.4 + ahead], upper=0.6)
        arm.hold(np.array([0.4]), print, velocity=np.array([1.0]))
        (point,) = sent[-1].points
        duration, room = seconds(point.time_from_start), 0.2 - ahead
        assert point.positions[0] == pytest.approx(0.6) and duration == pytest.approx(2 * room)
        c = _cubic(0.4 + ahead, 0.6, 1.0, duration)
        np.testing.assert_allclose(_end_accelerations(c, duration), [-1 / (2 * room)] * 2, rtol=1e-5)
        assert np.polynomial.polynomial.polyval(np.linspace(0.0, duration, 101), c).max() <= 0.6 + 1e-9
    finally:
        node.destroy_node()


@pytest.mark.parametrize("side", [1.0, -1.0, 0.0])
@pytest.mark.parametrize(("error", "duration"), [(0.1, 0.3), (0.3, 0.6)])
def test_a_stale_hold_near_a_limit_stops_short_of_it_wherever_the_tracking_error_has_the_arm(
        ros_context, side, error, duration):  # fmt: skip
    """Joint states too old to read: the arm is somewhere within its tracking ``error`` of the plan's 0.4 (``side``:
    that far on, back, or there), at 1 rad/s, 0.2 short of its upper limit (braking at 2 rad/s^2 takes 0.25). With
    0.1 the stop is the longest with which the controller's cubic from 0.1 on stays short of the limit, T = 3 x
    (0.2 - 0.1) / 1 (timed from the plan's 0.4, T = 0.4, the cubic from 0.5 passes it); with 0.3 the arm may be on
    the limit already, and the stop stays short of it from where the plan has the arm, T = 3 x 0.2 / 1, not a jolt."""
    node = Node("arm_stale_squeeze_test", context=ros_context)
    try:
        arm, sent = _moving_joints(node, [0.4], upper=0.6, settings={"input_timeout_s": 0.5,
                                                                      "max_tracking_error": error})  # fmt: skip
        now = arm.readings.now()
        arm.readings.now = lambda: now + 1.0  # a second on: over input_timeout_s
        warnings = []
        arm.hold(np.array([0.4]), warnings.append, velocity=np.array([1.0]))
        (point,) = sent[-1].points
        assert point.positions[0] == pytest.approx(0.6) and seconds(point.time_from_start) == pytest.approx(duration)
        assert warnings and warnings[0].startswith("holding on /arm_controller/joint_trajectory where the plan has")
        start = 0.4 + side * error
        if start < 0.6:  # on the limit already, nothing keeps it from it
            c = _cubic(start, 0.6, 1.0, duration)
            assert np.polynomial.polynomial.polyval(np.linspace(0.0, duration, 101), c).max() <= 0.6 + 1e-9
    finally:
        node.destroy_node()


def test_a_joint_whose_limit_is_near_sets_the_stops_time_and_the_others_brake_steadily_in_it(ros_context):
    """Two joints at 1 rad/s, 0.01 and 0.2 short of their upper limits: the nearer one sets the time (0.02 s, its
    steady deceleration onto the limit); the other brakes steadily in that time, v T / 2 on, not onto its own
    limit (0.2 in 0.02 s from 1 rad/s would take 15 rad/s)."""
    node = Node("arm_squeeze_two_test", context=ros_context)
    try:
        arm, sent = _moving_joints(node, [0.59, 0.4], upper=0.6)
        arm.hold(np.array([0.59, 0.4]), print, velocity=np.array([1.0, 1.0]))
        (point,) = sent[-1].points
        duration = seconds(point.time_from_start)
        assert duration == pytest.approx(0.02) and point.positions == pytest.approx([0.6, 0.41])
        c = _cubic(0.4, point.positions[1], 1.0, duration)
        speeds = np.polynomial.polynomial.polyval(np.linspace(0.0, duration, 101), np.polynomial.polynomial.polyder(c))
        assert speeds.max() <= 1.0 + 1e-6 and speeds.min() >= -1e-6  # slowing to rest, never faster, never back
    finally:
        node.destroy_node()


def test_a_hold_never_moves_an_arm_resting_past_a_limit_onto_it(ros_context):
    """An arm jogged past a soft limit (a URDF safety_controller's, 0.15 rad inside a UR's hard one) and at rest:
    the hold at a goal's end keeps it where it is instead of driving it onto the limit."""
    node = Node("arm_past_limit_test", context=ros_context)
    try:
        arm, sent = _moving_joints(node, [0.65, 0.2], velocity=0.0, upper=0.6)
        arm.hold(None, print)
        (point,) = sent[-1].points
        assert list(point.positions) == pytest.approx([0.65, 0.2]) and list(point.velocities) == [0.0, 0.0]
    finally:
        node.destroy_node()


def test_a_position_only_driver_gets_a_velocity_from_its_last_two_readings(ros_context):
    """joint_state_broadcaster reports NaN velocities for position-only hardware (Dynamixel, an SO-100): where the
    controller starts a trajectory from is still a moving state, by the last two readings' stamps (0.5 -> 0.6 rad in
    0.1 s: 1 rad/s); a jump over half a turn (a wrap) tells nothing (0). The model's `.vel` state stays missing."""
    node = Node("arm_difference_test", context=ros_context)
    try:
        arm = _arm(node, action_joint_names=["wrist", "jaw"], state_joint_names=["wrist", "wrist.vel"])
        now = node.get_clock().now().nanoseconds
        for offset_ns, positions in ((0, [0.5, 0.0]), (100_000_000, [0.6, 4.0])):
            msg = JointState(name=["wrist", "jaw"], position=positions, velocity=[math.nan, math.nan])
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now + offset_ns, 1_000_000_000)
            arm.readings._on_state(msg)
        arrival = arm.readings._joints["wrist"][2]
        arm.readings.now = lambda: arrival
        position, velocity = arm.readings.start_state(("wrist", "jaw"))
        np.testing.assert_allclose(velocity, [1.0, 0.0], atol=1e-5)  # stamps in float seconds
        np.testing.assert_allclose(position, [0.6, 4.0])
        ahead, _ = arm.readings.start_state(("wrist", "jaw"), 0.05)
        np.testing.assert_allclose(ahead, [0.65, 4.0], atol=1e-5)  # the arm moves on meanwhile
        assert arm.readings.from_rest(("wrist", "jaw")).tolist() == [True, True]  # as its controller starts one
        with pytest.raises(EngineError, match="wrist.vel"):
            arm.readings.snapshot()
    finally:
        node.destroy_node()


def _wrist_moving(node: Node, arm: ArmIO, reported: float = math.nan) -> None:
    """The wrist read at 0.5, then 0.6 rad 0.1 s later by the stamps (1 rad/s by the two), its velocity ``reported``
    (NaN: none, a position-only driver), and the arm's clock at the second's arrival."""
    now = node.get_clock().now().nanoseconds
    for offset_ns, position in ((0, 0.5), (100_000_000, 0.6)):
        msg = JointState(name=["wrist"], position=[position], velocity=[reported])
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now + offset_ns, 1_000_000_000)
        arm.readings._on_state(msg)
    arrival = arm.readings._joints["wrist"][2]
    arm.readings.now = lambda: arrival


@pytest.mark.parametrize(("starts_from", "reported", "refused"), [
    ("measured", math.nan, True),  # a position-only driver: the controller has no velocity state, starts from rest
    ("measured_at_rest", 1.0, True),  # a velocity reported, but the controller's state_interfaces lack it
    ("measured", 1.0, False),  # the controller starts from the measured 1 rad/s
    ("commanded", math.nan, False),  # it starts from its own command, the plan's 1 rad/s
])  # fmt: skip
def test_a_chunk_is_checked_from_rest_where_the_controller_starts_from_rest(ros_context, starts_from, reported,
                                                                            refused):
    """A wrist moving at 1 rad/s by its last two readings and by its plan; the next chunk goes on at 1 rad/s (limit
    1.2). A joint_trajectory_controller without a velocity state interface starts it from rest: its cubic from rest
    to 0.1 rad on at 1 rad/s in 0.1 s peaks at 4/3 rad/s, refused naming why and the remedy; one that starts from
    the measured velocity, or from its own command (interpolate_from_desired_state), plays on at 1 rad/s, taken."""
    node = Node("arm_position_only_start_test", context=ros_context)
    try:
        arm = _arm(node, {"trajectory_topic": "arm_controller/joint_trajectory", "controller_starts_from": starts_from},
                   action_joint_names=["wrist"], joint_lower_limits=[-3.0], joint_upper_limits=[3.0],
                   joint_velocity_limits=[1.2])  # fmt: skip
        _wrist_moving(node, arm, reported)
        plan = ArmPlan(ActionQueue(0.1, 0.3), horizon=3, threshold=1, limits=arm.readings.limits(), action_dim=1)
        plan.queue.rows = np.array([[0.7], [0.8], [0.9]])
        vla = VlaArm(node, arm, {"send_lead_s": 0.1, "max_missed_chunks": 3})
        checking = partial(vla._checked, plan, np.array([0.6]), np.array([1.0]), np.array([0.1, 0.2, 0.3]))
        if not refused:
            safe, start, velocity = checking()
            assert safe.positions[:, 0].tolist() == pytest.approx([0.7, 0.8, 0.9]) and velocity.tolist() == [1.0]
            return
        with pytest.raises(EngineError, match=r"^OUT_OF_RANGE: joint wrist: the first segment from 0\.6000 at 0\.000/s "
                           r".* would move at up to 1\.333/s, over its velocity limit 1\.2 \(the controller starts "
                           r"each trajectory of it from rest: set its interpolate_from_desired_state \(Humble: "
                           r"open_loop_control\) and controller_starts_from: commanded\)$"):  # fmt: skip
            checking()
    finally:
        node.destroy_node()


def _say(command: ControllerCommand, names: list[str], positions: list[float], velocities: list[float]) -> None:
    """``command`` hears a ~/controller_state whose reference is ``positions`` at ``velocities``, as it arrives."""
    command._on_message(command.topic, serialize_message(JointTrajectoryControllerState(joint_names=names, reference=(
        JointTrajectoryPoint(positions=positions, velocities=velocities)))))  # fmt: skip


def test_the_controllers_command_is_read_by_joint_name_and_carried_forward_only_briefly(ros_context):
    """A JTC's reference names its own joints in its own order (more than ours, maybe): ours are picked by name and
    carried forward at their velocity for as long as it is heard (a moving one only MOVING_AGE_S: with no plan of
    ours it is braking); a joint it does not name, positions not one per name, a non-finite value, a clock gone back
    or a word older than the timeout: not known."""
    node = Node("controller_command_test", context=ros_context)
    try:
        clock = [100.0]
        command = ControllerCommand(node, lambda: clock[0])
        assert command.now(("a", "b"), 0.5) is None  # nothing heard
        _say(command, ["b", "x", "a"], [0.2, 9.0, 0.45], [-1.0, 0.0, 1.0])
        clock[0] += 0.05
        positions, velocities = command.now(("a", "b"), 0.5)
        assert positions == pytest.approx([0.5, 0.15]) and velocities.tolist() == [1.0, -1.0]
        clock[0] += MOVING_AGE_S
        assert command.now(("a", "b"), 0.5) is None  # moving, and heard too long ago to carry forward
        _say(command, ["b", "a"], [0.2, 0.45], [])  # no velocities (interpolation none): at rest
        clock[0] += 0.4
        assert command.now(("a", "b"), 0.5)[0].tolist() == [0.45, 0.2]
        clock[0] += 0.2
        assert command.now(("a", "b"), 0.5) is None  # older than the timeout
        for names, positions, velocities in ((["a"], [0.45], []), (["a", "b"], [0.45], []),
                                             (["a", "b"], [0.45, math.nan], []), (["a", "b"], [0.45, 0.2], [1.0])):
            _say(command, names, positions, velocities)
            assert command.now(("a", "b"), 0.5) is None, (names, positions, velocities)
        _say(command, ["a", "b"], [0.45, 0.2], [])
        clock[0] -= 1.0
        assert command.now(("a", "b"), 0.5) is None  # the clock went back
    finally:
        node.destroy_node()


def test_without_a_plan_a_chunk_is_checked_from_the_command_the_controller_says_it_holds(ros_context):
    """controller_starts_from commanded (interpolate_from_desired_state) and no plan: the wrist reads 0.6 at rest,
    but the controller's ~/controller_state says it commands 0.45 (a hydraulic arm's offset, a position-only servo
    sagging under load, where our stop or its own hold left it), which is where it starts the next trajectory. A
    chunk to 0.68 in 0.1 s (limit 2.5 rad/s) is ~1 rad/s from the measured 0.6 and over 3 from 0.45: refused naming
    0.45. Without a word from the controller, or one older than input_timeout_s, only the measured state is known,
    and it passes."""
    node = Node("arm_command_now_test", context=ros_context)
    try:
        arm = _arm(node, {"trajectory_topic": "arm_controller/joint_trajectory", "controller_starts_from": "commanded",
                          "input_timeout_s": 0.5}, action_joint_names=["wrist"], joint_lower_limits=[-3.0],
                   joint_upper_limits=[3.0], joint_velocity_limits=[2.5])  # fmt: skip
        now = node.get_clock().now().nanoseconds
        for offset_ns in (0, 100_000_000):
            msg = JointState(name=["wrist"], position=[0.6], velocity=[0.0])
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now + offset_ns, 1_000_000_000)
            arm.readings._on_state(msg)
        arrival = arm.readings._joints["wrist"][2]
        plan = ArmPlan(ActionQueue(0.1, 0.3), horizon=3, threshold=1, limits=arm.readings.limits(), action_dim=1)
        vla = VlaArm(node, arm, {"send_lead_s": 0.1, "max_missed_chunks": 3})

        def checking():
            plan.queue.rows = np.array([[0.68], [0.74], [0.8]])
            return vla._checked(plan, None, None, np.array([0.1, 0.2, 0.3]))

        def controller_says(at: float) -> None:
            arm.readings.now = lambda: at
            _say(arm.controllers[0].controller.command, ["wrist"], [0.45], [0.0])
            arm.readings.now = lambda: arrival

        arm.readings.now = lambda: arrival
        assert checking()[1].tolist() == [0.6]  # nothing said: from the measured state only
        controller_says(arrival - 0.6)
        assert checking()[1].tolist() == [0.6]  # said too long ago
        controller_says(arrival - 0.05)
        with pytest.raises(EngineError, match=r"^OUT_OF_RANGE: joint wrist: the first segment from 0\.4500 at "
                           r"0\.000/s \(where the controller starts it\) would move at up to 3\.\d+/s, over its "
                           r"velocity limit 2\.5$"):  # fmt: skip
            checking()
    finally:
        node.destroy_node()


def test_a_hold_of_a_moving_position_only_arm_brakes_within_the_limit_from_rest(ros_context):
    """A joint_trajectory_controller without a velocity state interface starts the stop from rest at the measured
    position while the wrist moves at 1 rad/s (by its last two readings): the stop is timed for that cubic, from rest
    to v T / 2 on, 3 v / A = 1.5 s at 2 rad/s^2 (timed from the moving state, 0.5 s, the controller's cubic would
    brake at 6 rad/s^2)."""
    node = Node("arm_position_only_hold_test", context=ros_context)
    try:
        arm = _arm(node, {"trajectory_topic": "arm_controller/joint_trajectory"}, action_joint_names=["wrist"],
                   joint_lower_limits=[-3.0], joint_upper_limits=[3.0], joint_velocity_limits=[2.0],
                   joint_acceleration_limits=[2.0])  # fmt: skip
        sent = []
        arm.controllers[0]._publisher = SimpleNamespace(publish=sent.append)
        _wrist_moving(node, arm)
        arm.hold(np.array([0.6]), print, velocity=np.array([1.0]))
        (point,) = sent[-1].points
        duration = seconds(point.time_from_start)
        assert duration == pytest.approx(1.5, rel=1e-4) and point.positions[0] == pytest.approx(0.6 + 0.75, rel=1e-4)
        ends = _end_accelerations(_cubic(0.6, point.positions[0], 0.0, duration), duration)
        assert np.abs(ends).max() == pytest.approx(2.0, rel=1e-3)
    finally:
        node.destroy_node()


def test_where_the_controller_starts_is_measured_or_commanded(ros_context):
    node = Node("arm_starts_from_test", context=ros_context)
    try:
        with pytest.raises(ValueError, match=r"parameter controller_starts_from must be one of \['measured', "
                           r"'measured_at_rest', 'commanded'\], got 'desired'"):  # fmt: skip
            _arm(node, {"controller_starts_from": "desired"}, action_joint_names=["wrist"])
    finally:
        node.destroy_node()


def test_per_joint_tolerances_are_one_per_action_joint_within_their_ranges(ros_context):
    """joint_limit_margins / joint_max_start_jumps / joint_max_tracking_errors: empty = the scalar for every joint;
    else one per action joint, each within the scalar's range (a start jump or tracking error of 0 would refuse or
    stop every motion), refused at start naming the list."""
    node = Node("arm_tolerances_test", context=ros_context)
    try:
        names = {"action_joint_names": ["shoulder", "lift"]}
        arm = _arm(node, {"max_tracking_error": 0.25}, **names, joint_max_tracking_errors=[0.3, 0.02],
                   joint_limit_margins=[0.0, 0.0])  # fmt: skip
        np.testing.assert_array_equal(arm.tolerances["max_tracking_error"], [0.3, 0.02])
        np.testing.assert_array_equal(arm.tolerances["limit_margin"], [0.0, 0.0])
        np.testing.assert_array_equal(arm.tolerances["max_start_jump"], [0.1, 0.1])  # the scalar's default
        scalar = _arm(node, {"max_tracking_error": 0.25}, **names).tolerances["max_tracking_error"]
        np.testing.assert_array_equal(scalar, [0.25, 0.25])
        for bad in ({"joint_max_tracking_errors": [0.3]}, {"joint_max_tracking_errors": [0.3, 0.0]},
                    {"joint_max_start_jumps": [0.1, math.nan]}, {"joint_limit_margins": [0.0, 2.0]}):  # fmt: skip
            with pytest.raises(ValueError, match=f"parameter {next(iter(bad))} must be empty or 2 numbers"):
                _arm(node, **names, **bad)
    finally:
        node.destroy_node()


def test_a_stale_hold_is_timed_for_each_arm_joints_own_tracking_error(ros_context):
    """With joint states too old to read, the hold's stop is timed for the farthest each joint may be from the plan,
    its own max_tracking_error (joint_max_tracking_errors); a gripper on its own controller is no part of it."""
    node = Node("arm_hold_per_joint_test", context=ros_context)
    try:
        arm = _arm(node, {"input_timeout_s": 0.5, "trajectory_topic": "arm_controller/joint_trajectory"},
                   action_joint_names=["shoulder", "jaw", "elbow"], gripper_joint_names=["jaw"],
                   joint_lower_limits=[-3.0] * 3, joint_upper_limits=[3.0] * 3, joint_velocity_limits=[1.0] * 3,
                   joint_max_tracking_errors=[0.3, 5.0, 0.9])  # fmt: skip
        sent = []
        arm.controllers[0]._publisher = SimpleNamespace(publish=sent.append)
        msg = JointState(name=["shoulder", "jaw", "elbow"], position=[0.0, 0.0, 0.0])
        msg.header.stamp = node.get_clock().now().to_msg()
        arm.readings._on_state(msg)
        readings = arm.readings
        readings._joints = {name: (p, v, arrival - 1.0, stamp)
                            for name, (p, v, arrival, stamp) in readings._joints.items()}
        arm.hold(np.array([0.4, 0.1, 0.2]), print)
        (point,) = sent[-1].points
        assert list(sent[-1].joint_names) == ["shoulder", "elbow"] and list(point.positions) == [0.4, 0.2]
        assert seconds(point.time_from_start) == pytest.approx(1.5 * 0.9 / 1.0)  # the elbow's 0.9 at 1 rad/s
    finally:
        node.destroy_node()


def test_a_controller_scaled_below_full_speed_is_named(ros_context):
    """speed_scaling_topic (a UR's speed_scaling_state_broadcaster, percent): plans are timed at full speed, so a
    scaling under 99%, none yet, or one older than input_timeout_s is why the arm may not run; without the topic
    nothing is said. Two drivers (speed_scaling_topics): each is asked the same."""
    node = Node("arm_scaling_test", context=ros_context)
    try:
        names = {"action_joint_names": ["shoulder"]}
        assert _arm(node, **names).slowed() == ""
        topic = "/speed_scaling_state_broadcaster/speed_scaling"
        arm = _arm(node, {"speed_scaling_topic": topic[1:], "input_timeout_s": 0.5}, **names)
        assert "no speed scaling on /speed_scaling_state_broadcaster/speed_scaling yet" in arm.slowed()
        arm._on_scaling(topic, Float64(data=100.0))
        assert arm.slowed() == ""
        arm._on_scaling(topic, Float64(data=50.0))
        assert "speed scaling on /speed_scaling_state_broadcaster/speed_scaling is 50%" in arm.slowed()
        arm._on_scaling(topic, Float64(data=math.nan))
        assert "speed scaling on /speed_scaling_state_broadcaster/speed_scaling is nan%" in arm.slowed()
        arm._scalings[topic] = (100.0, arm.readings.now() - 1.0)
        assert "s old, over input_timeout_s 0.5" in arm.slowed()
        left, right = "/left/speed_scaling", "/right/speed_scaling"
        arms = _arm(node, {"input_timeout_s": 0.5}, speed_scaling_topics=[left, right], **names)
        arms._on_scaling(left, Float64(data=100.0))
        assert f"no speed scaling on {right} yet" in arms.slowed()
        arms._on_scaling(right, Float64(data=30.0))
        assert f"speed scaling on {right} is 30%" in arms.slowed()
        arms._on_scaling(right, Float64(data=100.0))
        assert arms.slowed() == ""
        with pytest.raises(ValueError, match="speed_scaling_topics replaces speed_scaling_topic"):
            _arm(node, {"speed_scaling_topic": topic}, speed_scaling_topics=[left], **names)
    finally:
        node.destroy_node()
