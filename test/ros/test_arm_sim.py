"""`arm_sim` through real rclpy nodes, as the instruction node will drive it: a FollowJointTrajectory goal is played
from where the arm is, /joint_states reaches its last point and the goal SUCCEEDS; a second goal preempts the first
(ABORTED INVALID_GOAL with joint_trajectory_controller's words) and plays on from where the arm was, never jumping;
goals a controller refuses are rejected with the reason logged; a cancel holds the arm where it is; a trajectory on
the topic is played too; the URDF reaches a late subscriber of robot_description (TRANSIENT_LOCAL); a missing URDF
stops the node with the reason."""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from control_msgs.action import FollowJointTrajectory
from rclpy.action import ActionServer
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from rclpy.task import Future
from arm_harness import arm_io_for, run_on, trajectory
from ros_harness import make_context, send_goal, spin_nodes, wait_until
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from oxygen_ros.control.arm.joint_limits import urdf_limits
from oxygen_ros.control.arm.safety import SafeTargets
from oxygen_ros.nodes.arm_io import ArmIO
from oxygen_ros.nodes.arm_sim import PREEMPTED, REACHED, SO100_JOINTS, ArmSim, check_interfaces, main
from oxygen_ros.nodes.future_wait import wait
from oxygen_ros.nodes.spin import EXIT_ON_REFUSAL

ACTION = "/arm_controller/follow_joint_trajectory"
Result = FollowJointTrajectory.Result


class Arm:
    """The simulated arm and a client node recording /joint_states as (stamp s, positions, velocities)."""

    def __init__(self, context) -> None:
        self.node = ArmSim(context=context)
        self.client = Node("arm_sim_client", context=context)
        self.states: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.client.create_subscription(JointState, "/joint_states", self._on_state, 100)

    def _on_state(self, msg: JointState) -> None:
        assert list(msg.name) == SO100_JOINTS
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self.states.append((stamp, np.array(msg.position), np.array(msg.velocity)))

    def position(self) -> np.ndarray:
        wait_until(lambda: self.states, 10.0, "a JointState")
        return self.states[-1][1]

    def stands(self, timeout: float = 5.0) -> np.ndarray:
        """Where the arm is once a JointState says it is at rest (a state published as a goal ended may arrive after
        its result)."""
        wait_until(lambda: self.states and np.allclose(self.states[-1][2], 0.0), timeout, "the arm at rest")
        return self.states[-1][1]

    def reaches(self, target: np.ndarray, timeout: float = 10.0) -> None:
        wait_until(lambda: np.allclose(self.states[-1][1], target, atol=1e-9), timeout, f"the arm at {target}")

    def send(self, rows: list[tuple[float, np.ndarray]], names: list[str] = SO100_JOINTS, stamp: float = 0.0):
        return send_goal(self.client, FollowJointTrajectory, ACTION, FollowJointTrajectory.Goal(
            trajectory=trajectory(rows, names, stamp)))  # fmt: skip


@pytest.fixture(scope="module")
def arm(ros_domain_id):
    context = make_context(ros_domain_id)
    arm = Arm(context)
    try:
        with spin_nodes(context, arm.node, arm.client):
            yield arm
    finally:
        context.try_shutdown()


def arm_io_of(arm: Arm, settings: dict | None = None, **number_lists: list[float]) -> ArmIO:
    """instruction_node's side of the arm (its defaults, but ``settings`` and ``number_lists``), on the client node,
    once the controller is there."""
    io = arm_io_for(arm.client, settings, action_joint_names=SO100_JOINTS, **number_lists)
    wait_until(io.controllers[0].listening, 10.0, "the arm's controller")
    wait_until(lambda: io.readings._described, 10.0, "the URDF")  # the limits every stop is planned within
    return io


def first_stop_unplanned(io: ArmIO) -> list:
    """Make the first stop ``io`` plans fail (as with no joint states to plan it from); the plans made, listed."""
    ctl = io.controllers[0]
    plans, planned = [], ctl._stop_point

    def first_unplanned(*args):
        plans.append(args)
        return None if len(plans) == 1 else planned(*args)

    ctl._stop_point = first_unplanned
    return plans


def max_speed(states: list[tuple[float, np.ndarray, np.ndarray]]) -> float:
    """The fastest any joint moved between consecutive JointStates, rad/s."""
    return max(np.max(np.abs(b[1] - a[1])) / (b[0] - a[0]) for a, b in zip(states, states[1:]))


def test_a_goal_is_played_to_its_last_point_and_succeeds(arm):
    start = arm.position()
    middle, target = start + 0.2, start + np.linspace(-0.3, 0.3, 6)
    goal = arm.send([(0.4, middle), (0.8, target)])
    out = goal.result(timeout=10.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED
    assert (out.result.error_code, out.result.error_string) == (Result.SUCCESSFUL, REACHED)
    arm.reaches(target, timeout=2.0)
    last = goal.feedback[-1]
    assert list(last.joint_names) == SO100_JOINTS and np.allclose(last.actual.positions, last.desired.positions)
    assert np.allclose(last.error.positions, 0.0)
    indices = [feedback.index for feedback in goal.feedback]
    assert indices == sorted(indices) and set(indices) <= {0, 1, 2}


def test_a_second_goal_preempts_the_first_which_plays_on_from_where_the_arm_was(arm):
    start = arm.position()
    first = arm.send([(3.0, start + 1.5)])  # 0.5 rad/s
    begin = len(arm.states)
    time.sleep(0.6)
    second = arm.send([(1.0, start - 0.5)])  # from where the arm is (~0.3 rad along): about 0.8 rad/s
    out = first.result(timeout=5.0)
    assert out.status == GoalStatus.STATUS_CANCELED  # as JTC's preemption ends it
    assert (out.result.error_code, out.result.error_string) == (Result.INVALID_GOAL, PREEMPTED)
    assert second.result(timeout=5.0).status == GoalStatus.STATUS_SUCCEEDED
    arm.reaches(start - 0.5, timeout=2.0)
    played = arm.states[begin:]
    # under 2 rad/s even if the second goal came late (the arm at most at start + 1.5): a restart from `start`, or a
    # jump to anywhere but where the arm was, moves ~0.3 rad in one 20 ms tick, 15 rad/s
    assert max_speed(played) <= 2.0
    assert max(np.max(np.abs(velocity)) for _, _, velocity in played) <= 2.0


@pytest.mark.parametrize(
    "case",
    ["an unknown joint", "times not increasing", "a stamp in the past"],
)
def test_goals_a_controller_refuses_are_rejected_with_the_reason_logged(arm, case, capfd):
    start = arm.position()
    names, rows, stamp, reason = {
        "an unknown joint": ([*SO100_JOINTS[:5], "elbow"], [(1.0, start)], 0.0, "Incoming joint 'elbow'"),
        "times not increasing": (SO100_JOINTS, [(1.0, start), (1.0, start + 0.1)], 0.0, "not strictly increasing"),
        "a stamp in the past": (SO100_JOINTS, [(1.0, start)], time.time() - 5.0, "that ends in the past"),
    }[case]
    with pytest.raises(RuntimeError, match="rejected"):
        arm.send(rows, names, stamp)
    wait_until(lambda: reason in capfd.readouterr().err, 5.0, f"'{reason}' logged")
    time.sleep(0.1)
    assert np.array_equal(arm.states[-1][1], start)  # nothing moved


def test_cancel_holds_the_arm_where_it_is(arm):
    start = arm.position()
    goal = arm.send([(3.0, start + 1.5)])
    time.sleep(0.5)
    goal.cancel()
    out = goal.result(timeout=5.0)
    assert out.status == GoalStatus.STATUS_CANCELED
    assert (out.result.error_code, out.result.error_string) == (0, "")  # JTC's empty result
    held = arm.stands()
    assert 0.05 < held[0] - start[0] < 1.0  # it moved, then stopped short of the target
    count = len(arm.states)
    wait_until(lambda: len(arm.states) > count + 5, 5.0, "more states")
    assert all(np.array_equal(position, held) for _, position, _ in arm.states[count:])
    assert np.allclose(arm.states[-1][2], 0.0)


def test_a_trajectory_on_the_topic_is_played_from_where_the_arm_is(arm):
    start = arm.position()
    publisher = arm.client.create_publisher(JointTrajectory, "/arm_controller/joint_trajectory", 10)
    try:
        wait_until(lambda: publisher.get_subscription_count() > 0, 5.0, "arm_sim subscribed")
        begin = len(arm.states)
        target = start[::-1].copy() + 0.1
        publisher.publish(trajectory([(0.5, target)], SO100_JOINTS[::-1], 0.0))  # another order: mapped by name
        arm.reaches(target[::-1], timeout=5.0)
        assert max_speed(arm.states[begin:]) <= np.max(np.abs(target[::-1] - start)) / 0.5 * 1.01
    finally:
        arm.client.destroy_publisher(publisher)


def test_the_urdf_reaches_a_late_subscriber_of_robot_description(arm):
    received: list[String] = []
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    subscription = arm.client.create_subscription(String, "/robot_description", received.append, latched)
    try:
        wait_until(lambda: received, 10.0, "robot_description")
    finally:
        arm.client.destroy_subscription(subscription)
    limits = urdf_limits(received[0].data)
    assert list(limits) == SO100_JOINTS  # what the instruction node reads: every joint bounded
    assert all(limit.lower < 0.0 < limit.upper for name, limit in limits.items() if name != "gripper")
    assert limits["gripper"].lower == 0.0 and limits["gripper"].upper > 1.0


def test_a_missing_urdf_stops_the_node_with_the_reason(ros_domain_id, capfd):
    assert main([EXIT_ON_REFUSAL, "--ros-args", "-p", "urdf_path:=/nonexistent/arm.urdf"]) == 1
    assert "urdf_path: /nonexistent/arm.urdf does not exist" in capfd.readouterr().err
    assert main([EXIT_ON_REFUSAL, "--ros-args", "-p", "initial_positions:=[0.0]"]) == 1
    assert "initial_positions must be 6 finite numbers" in capfd.readouterr().err


def test_a_trajectory_taken_after_its_first_target_was_due_is_refused_and_replaced_by_a_stop(arm):
    """instruction_node's side (ArmIO): trajectories go unstamped (the controller starts them when it takes them,
    so a late delivery never has it sample one mid-segment, a jump); one taken after its first target was due on
    the node's clock is a stale plan: the send refused, saying how late, and the trajectory replaced at once by a
    braking stop, not a cancel (the controller would hold the measured position at once), whatever the caller does
    next."""
    io = arm_io_of(arm)
    ctl = io.controllers[0]  # its one controller
    here = arm.position()
    stops, cancels = [], []  # the controller's answers to our stops; the goals we cancelled (none: a cancel jolts)
    answered, cancel = ctl._on_stop, ctl._cancel
    ctl._on_stop = lambda future, *rest: (stops.append(future.result().accepted), answered(future, *rest))
    ctl._cancel = lambda handle: (cancels.append(handle), cancel(handle))
    # its first target due 4 s ago (4 s after it is taken: slow, so the stop finds the arm about where it was, even
    # taken a second late); then one due 1 s ahead on the node's clock (time enough to be taken on a loaded machine)
    for back, offset, late, times in ((8.0, -0.05, True, [4.0, 4.1]), (0.0, 0.05, False, [1.0, 1.1])):
        targets = np.vstack([here + offset, here + offset])
        safe = SafeTargets(targets, np.zeros_like(targets), np.array(times), 0)
        refused = run_on(arm, io.send(io.readings.now() - back, safe))
        assert ("after its first target was due" in refused) if late else refused == "", refused
        if late:  # a stop replaced it: the arm stays about where it was, far from the stale plan's end
            assert run_on(arm, io.stop_answered(5.0)) == ""  # ArmIO stopped it at once
            wait_until(lambda: stops == [True], 5.0, "the stop taken")  # the answer's callback may run a moment later
            assert not cancels
            time.sleep(0.5)
            assert np.abs(arm.position() - here).max() < 0.02
    arm.reaches(here + 0.05)  # the one taken in time plays
    wait_until(lambda: not ctl._live, 5.0, "its end")
    # a hold while a trajectory is on its way (right after it is sent) that could plan no stop: once the trajectory
    # is taken, nothing sent after it replaces it, so a stop from where the arm is does
    start, real = arm.position(), ctl._client.send_goal_async
    plans = first_stop_unplanned(io)

    def send_then_hold(goal, *args, **kwargs):
        future = real(goal, *args, **kwargs)
        ctl._client.send_goal_async = real  # the stop goes out as usual
        io.hold(None, print)
        return future

    ctl._client.send_goal_async = send_then_hold  # slow (taken, it plays at once): the stop finds the arm near start
    ramp = SafeTargets(np.vstack([start + 0.1, start + 1.0]), np.zeros((2, len(start))), np.array([10.0, 20.0]), 0)
    assert "told to hold while the trajectory was on its way" in run_on(arm, io.send(io.readings.now(), ramp))
    wait_until(lambda: stops == [True, True], 5.0, "the stop sent when it was taken")
    time.sleep(1.0)
    assert len(plans) == 2 and not cancels  # the hold's (none), then the stop at taking
    assert np.abs(arm.position() - start).max() < 0.02 and not io.take_faults()  # stopped by ours: no fault


def test_a_goals_end_waits_for_a_trajectory_on_its_way_and_the_stop_its_taking_brings(arm):
    """A hold while a trajectory is on its way that could plan no stop (as without joint states; here its first
    plan fails): the trajectory, once taken, is stopped (``_on_accepted``). ``stop_answered`` (a goal's ``settle``,
    before its result and a shutdown) waits for that answer first, then for the stop's, so the goal never reports
    while a trajectory may still play with nobody left to stop it. The controller's answer is held back 0.5 s here:
    it comes after the hold."""
    io = arm_io_of(arm)
    ctl = io.controllers[0]  # its one controller
    start, real = arm.position(), ctl._client.send_goal_async
    plans = first_stop_unplanned(io)

    def answered_late(goal, *args, **kwargs):
        ctl._client.send_goal_async = real  # the stop goes out as usual
        late = Future()
        real(goal, *args, **kwargs).add_done_callback(
            lambda f: threading.Timer(0.5, late.set_result, (f.result(),)).start())
        io.hold(None, print)  # on its way: no stop planned, nothing sent
        return late

    ctl._client.send_goal_async = answered_late
    # slow (arm_sim takes and plays it at once; the answer only is held back): the stop finds the arm near its start
    ramp = SafeTargets(np.vstack([start + 0.1, start + 1.0]), np.zeros((2, len(start))), np.array([10.0, 20.0]), 0)
    sending = arm.client.executor.create_task(io.send(io.readings.now(), ramp))
    wait_until(lambda: len(plans) == 1, 5.0, "the hold")
    assert ctl._stop_sent is None  # nothing to wait for but the trajectory on its way
    assert run_on(arm, io.stop_answered(5.0)) == ""
    assert len(plans) == 2 and ctl._stop_sent is not None and ctl._stop_sent[0].result().accepted  # the stop, taken
    wait_until(sending.done, 5.0, "the send's end")
    assert "told to hold while the trajectory was on its way" in sending.result()
    time.sleep(0.5)
    assert np.abs(arm.position() - start).max() < 0.02 and not io.take_faults()  # stopped by ours: no fault
    ctl._client.destroy()


def test_a_trajectory_taken_after_it_was_given_up_on_is_no_takeover(arm):
    """A controller slower than answer_wait_s (0.5 s; it takes the trajectory after 0.7 s): the send gives up on it
    and says so; the controller then takes it all the same, preempting our goal before (CANCELED, JTC's words), and
    that end is handled before the late acceptance is (held back another second here: two executor threads may
    take them in either order). It is our doing, not another client's takeover: no fault, so the hold that follows
    sends this controller a stop (a takeover would have it sent nothing while the late trajectory plays)."""
    io = arm_io_of(arm, {"answer_wait_s": 0.5})
    ctl, server = io.controllers[0], arm.node._server
    start, real, on_goal = arm.position(), ctl._client.send_goal_async, server._goal_callback
    hold = np.zeros((2, len(start)))
    assert run_on(arm, io.send(io.readings.now(), SafeTargets(np.vstack([start, start]), hold,
                                                               np.array([0.5, 30.0]), 0))) == ""  # fmt: skip

    def slow_controller(goal):
        server.register_goal_callback(on_goal)
        time.sleep(0.7)
        return on_goal(goal)

    def answer_handled_late(goal, *args, **kwargs):
        ctl._client.send_goal_async = real
        late = Future()
        real(goal, *args, **kwargs).add_done_callback(
            lambda f: threading.Timer(1.0, late.set_result, (f.result(),)).start())
        return late

    server.register_goal_callback(slow_controller)
    ctl._client.send_goal_async = answer_handled_late
    ramp = SafeTargets(np.vstack([start + 0.2, start + 1.0]), hold, np.array([1.0, 5.0]), 0)
    assert "did not answer within answer_wait_s 0.5 s" in run_on(arm, io.send(io.readings.now(), ramp))
    wait_until(lambda: not ctl._live, 5.0, "our goal before it ended")  # (the late acceptance not yet handled)
    assert io.take_faults() == []
    wait_until(lambda: not np.allclose(arm.states[-1][1], start), 5.0, "the late trajectory playing")
    io.hold(None, print)  # as the goal's end does
    wait_until(lambda: len(ctl._answer_times) >= 2 and ctl._stop_sent is not None and ctl._stop_sent[0].done(), 5.0,
               "the hold's stop answered")  # fmt: skip
    assert ctl._stop_sent[0].result().accepted
    assert np.abs(arm.stands() - start).max() < 0.3 and io.take_faults() == []  # braked on its way, far from +1


def test_a_hold_brings_the_arm_to_rest_without_a_jolt(arm):
    """ArmIO.hold on the action: a cancel would make the controller hold the measured position at once, a jolt at
    speed; instead one point at rest v T / 2 past where the plan has the arm, T = v / a the braking time (here 0.5 s
    at 1 rad/s^2, a little more for the way the arm went on since ``at`` was read: ``_braking_times``; HOLD_MIN_S
    without acceleration limits), replaces the trajectory playing: the arm slows through
    intermediate speeds, glides on that far and stands; a second hold before any new trajectory sends nothing. (A
    stop the controller takes later than T / 2 after ``at`` finds the arm past it and turns it back: T 0.5 s keeps a
    busy test machine's stalls well inside that.)"""
    io = arm_io_of(arm, joint_acceleration_limits=[1.0] * len(SO100_JOINTS))
    ctl = io.controllers[0]  # its one controller
    start = arm.position()
    moving = arm.send([(3.0, start + 1.5)])  # 0.5 rad/s every joint
    time.sleep(1.0)
    at, seen = io.readings.measured(tuple(SO100_JOINTS)), len(arm.states)
    io.hold(at, print, velocity=np.full(len(SO100_JOINTS), 0.5))
    assert moving.result(timeout=5.0).result.error_string == PREEMPTED  # replaced, not cancelled by us
    assert run_on(arm, io.stop_answered(5.0)) == ""  # taken: a goal's result has nothing to add
    wait_until(lambda: len(ctl._answer_times) == 1, 5.0, "the stop's answer timed")  # a later stop's lead
    assert 0.0 < ctl._answer_times[0] < 5.0
    time.sleep(1.0)
    rest = arm.states[-1][1]
    # 125 mrad on; more for the way the arm went on since `at` was read (a stale reading: a longer, gentler stop)
    assert np.all((rest - at > 0.5 * 0.5 / 2 - 0.005) & (rest - at < 0.3)), rest - at
    assert np.allclose(arm.states[-1][2], 0.0)
    braking = [velocity[0] for _, _, velocity in arm.states[seen:]]
    assert sum(0.05 < v < 0.45 for v in braking) >= 10, braking  # slowing (50 Hz states over the 0.5 s stop), no step
    io.hold(None, print)  # a goal's end after its own hold: nothing was sent since, so no second stop
    time.sleep(0.3)
    assert ctl._stopping and np.array_equal(arm.states[-1][1], rest)
    ctl._client.destroy()


def _ramping(arm: Arm) -> tuple[ArmIO, object, np.ndarray, SafeTargets]:
    """(ArmIO, its one controller, where the arm started, the plan): our trajectory taking the arm 1 rad up over
    10 s, sent and taken."""
    io = arm_io_of(arm)
    start = arm.position()
    ramp = SafeTargets(np.vstack([start + 0.1, start + 1.0]), np.zeros((2, len(start))), np.array([1.0, 10.0]), 0)
    assert run_on(arm, io.send(io.readings.now(), ramp)) == ""
    return io, io.controllers[0], start, ramp


def test_a_trajectory_that_could_not_be_sent_leaves_nothing_waiting_for_its_answer(arm):
    """send_goal_async raising (the client torn down, an rcl error): the trajectory is not left among those on their
    way, where it would keep every CANCELED of ours looking like our own replacement and hide another client's
    takeover; the error reaches the caller."""
    io, ctl, start, ramp = _ramping(arm)
    wait_until(lambda: not ctl._unanswered, 5.0, "our first trajectory answered")

    def broken(trajectory):
        raise RuntimeError("the action client is gone")

    working, ctl._send_goal = ctl._send_goal, broken
    with pytest.raises(RuntimeError, match="the action client is gone"):
        ctl.dispatch(ramp)
    assert ctl._unanswered == {}
    ctl._send_goal = working
    io.hold(None, print)  # (the first trajectory still plays: braked)
    ctl._client.destroy()


def test_another_clients_goal_taking_the_arm_is_a_fault_and_no_stop_of_ours_preempts_it(arm):
    """An operator's trajectory (another client of the controller) preempts ours: JTC ends ours CANCELED with its
    preemption's words, which ArmIO reports as a fault the controller took over (``Fault.taken_over``); a hold
    before the goal takes that fault (a missed chunk's) and the hold that ends the goal both send nothing, so the
    operator's trajectory plays to its end."""
    io, ctl, start, _ = _ramping(arm)
    operator = arm.send([(1.0, start - 0.2)])
    wait_until(lambda: ctl._fault is not None, 5.0, "our trajectory's end")
    io.hold(None, print)  # the fault not yet taken
    assert ctl._stop_sent is None and ctl._stopping
    (fault,) = io.take_faults()
    assert fault.taken_over and PREEMPTED in fault.why, fault
    io.hold(None, print)
    assert ctl._stop_sent is None and ctl._stopping  # nothing sent, and a goal's end sends nothing either
    assert operator.result(timeout=5.0).status == GoalStatus.STATUS_SUCCEEDED
    arm.reaches(start - 0.2, timeout=2.0)
    ctl._client.destroy()


def test_another_clients_goal_preempting_our_stop_is_a_takeover_and_nothing_of_ours_follows(arm):
    """Our trajectory stopped by a hold (a missed chunk's: the goal goes on), then an operator's trajectory preempts
    the braking stop: JTC ends it CANCELED with nothing of ours sent since, so another client took the arm
    (``Fault.taken_over``). Until the goal takes that fault, our next plan is refused unsent, so the operator's
    trajectory plays to its end."""
    io, ctl, start, ramp = _ramping(arm)
    time.sleep(0.3)
    io.hold(None, print)
    wait_until(lambda: ctl._stops, 5.0, "our stop taken")
    operator = arm.send([(1.0, start - 0.2)])
    wait_until(lambda: ctl._fault is not None, 5.0, "our stop's end")
    sends = ctl._sends
    refused = run_on(arm, io.send(io.readings.now(), ramp))
    assert refused == f"{ACTION} was taken over (another client's goal, a cancel or the controller's deactivation): " \
        "nothing sent", refused
    (fault,) = io.take_faults()
    assert fault.taken_over and "ended our braking stop" in fault.why and PREEMPTED in fault.why, fault
    assert ctl._sends == sends and operator.result(timeout=5.0).status == GoalStatus.STATUS_SUCCEEDED
    arm.reaches(start - 0.2, timeout=2.0)
    io.hold(None, print)
    assert ctl._sends == sends  # the goal's end sends nothing either
    ctl.dispatch(ramp)  # one of ours that slipped out as the takeover came (the check and the send raced): it plays,
    io.hold(None, print)  # so a hold brakes it
    assert ctl._stop_sent is not None and ctl._sends == sends + 2
    ctl._client.destroy()


def test_a_stop_the_controller_refuses_has_ours_cancelled_before_the_goal_reports(arm):
    """A goal's result, and so a shutdown, waits for the controller's answer to the arm's stop (``stop_answered``,
    instruction_node's ``settle``): refused, our trajectory is cancelled while the node can still send, the
    controller holds the arm where it is, and the result says so. (A joint_trajectory_controller refuses every goal
    while it is inactive, e.g. switched off mid-goal; arm_sim is always active, so here the stop ends moving, which
    it refuses as JTC does.) A stop answered once a newer trajectory was sent cancels nothing of it."""
    io = arm_io_of(arm)
    ctl = io.controllers[0]  # its one controller
    here = arm.position()
    safe = SafeTargets(np.vstack([here + 0.1, here + 1.0]), np.zeros((2, len(here))), np.array([0.5, 4.0]), 0)
    assert run_on(arm, io.send(io.readings.now(), safe)) == ""
    time.sleep(1.0)  # on its way to here + 1 at about 0.25 rad/s
    planned = ctl._stop_point

    def moving_stop(*args) -> JointTrajectoryPoint:
        point = planned(*args)
        point.velocities = [0.1] * len(point.positions)
        return point

    ctl._stop_point = moving_stop
    io.hold(None, print)
    assert "refused the arm's stop: our trajectory was cancelled" in run_on(arm, io.stop_answered(5.0))
    wait_until(lambda: not ctl._live, 5.0, "the cancelled goal's end")
    stood = arm.stands()
    time.sleep(0.5)
    np.testing.assert_array_equal(arm.position(), stood)  # held where it was, short of the plan's end
    assert (np.abs(stood - (here + 1.0)) > 0.5).all()
    ramp = lambda start: SafeTargets(np.vstack([start + 0.05, start + 0.1]), np.zeros((2, len(start))),  # noqa: E731
                                     np.array([0.5, 1.0]), 0)  # fmt: skip
    assert run_on(arm, io.send(io.readings.now(), ramp(stood))) == ""
    io.hold(None, print)  # refused again; a newer trajectory goes out before the goal's result waits for the answer
    assert run_on(arm, io.send(io.readings.now(), ramp(stood + 0.1))) == ""
    assert run_on(arm, io.stop_answered(5.0)) == ""  # nothing of the newer one is cancelled: it plays to its end
    arm.reaches(stood + 0.2)
    ctl._client.destroy()


@pytest.mark.parametrize("claimed", ["measured", "measured_at_rest", "commanded"])
def test_the_controllers_own_parameters_say_where_it_starts_a_trajectory(arm, claimed):
    """arm_sim declares a joint_trajectory_controller's state_interfaces [position, velocity] and
    interpolate_from_desired_state false, found as the node publishing the action's status and asked through its
    parameter service: it starts each trajectory from the measured state, as controller_starts_from measured says;
    either other word is refused naming the one to use."""
    io = arm_io_of(arm, {"controller_starts_from": claimed})
    ctl = io.controllers[0]  # its one controller
    message = run_on(arm, io.misconfigured(io.readings.limits()))
    if claimed == "measured":
        assert message == ""
    else:
        assert message == ("/arm_sim starts each trajectory from the measured state (its state_interfaces ['position', "
                           "'velocity'] include velocity and its interpolate_from_desired_state is false), but "
                           f"controller_starts_from is {claimed}: set controller_starts_from: measured")  # fmt: skip
    ctl._client.destroy()


def test_the_controllers_parameters_are_read_ahead_while_the_model_answers(arm):
    """check_ahead starts the read (instruction_node: before the goal's first chunk is asked for); the check that
    follows while it is under way waits for it, asking nothing itself, and answers from what it read."""
    io = arm_io_of(arm, {"controller_starts_from": "measured"})
    ctl = io.controllers[0]  # its one controller
    params, reads, gate = ctl.controller._params, [], Future()
    ask = params._ask

    async def held(*args):  # the controller's answer held until the check is under way
        reads.append(args[1])
        await wait(arm.client, gate, 10.0)
        return await ask(*args)

    params._ask = held
    io.check_ahead()
    wait_until(lambda: reads, 10.0, "the read ahead asking")
    check = arm.client.executor.create_task(io.misconfigured(io.readings.limits()))
    time.sleep(0.3)
    assert not check.done() and len(reads) == 1  # waiting for the read ahead
    gate.set_result(None)
    wait_until(check.done, 10.0, "the check")
    assert check.result() == "" and len(reads) == 1 and "state_interfaces" in reads[0]
    ctl._client.destroy()


def test_the_state_interfaces_are_position_and_velocity_or_position_only():
    for wrong in (["velocity"], ["position", "effort"], ["position", "position"]):
        with pytest.raises(ValueError, match=r"parameter state_interfaces must be \[position\] or \[position, "
                           r"velocity\]"):  # fmt: skip
            check_interfaces(wrong)
    check_interfaces(["position"])


@contextmanager
def another_arm(arm: Arm, namespace: str, **parameters) -> Iterator[ArmSim]:
    """An arm_sim under ``namespace`` with ``parameters``, spinning beside the module's arm."""
    node = ArmSim(context=arm.node.context, namespace=namespace,
                  parameter_overrides=[Parameter(k, value=v) for k, v in parameters.items()])  # fmt: skip
    arm.client.executor.add_node(node)
    try:
        yield node
    finally:
        arm.client.executor.remove_node(node)
        node.destroy_node()


def test_a_controller_without_a_velocity_state_starts_each_trajectory_without_the_arms_velocity_and_says_so(arm):
    """arm_sim with state_interfaces [position] starts a trajectory that replaces a moving one with a straight line
    from where the arm is to its first point (JTC interpolates from a state whose velocity it cannot read), its
    joint_states still carrying velocities; its parameters say so, on the action and on the topic, and
    controller_starts_from measured is refused."""
    with another_arm(arm, "/rest", state_interfaces=["position"]) as rest:
        action = "/rest/arm_controller/follow_joint_trajectory"
        start = rest._trajectory.sample(rest._now())
        send_goal(arm.client, FollowJointTrajectory, action, FollowJointTrajectory.Goal(
            trajectory=trajectory([(2.0, start + 1.0)], SO100_JOINTS)))  # fmt: skip
        wait_until(lambda: np.abs(rest._trajectory.velocity(rest._now())).min() > 0.3, 5.0, "the arm moving")
        send_goal(arm.client, FollowJointTrajectory, action, FollowJointTrajectory.Goal(
            trajectory=trajectory([(1.0, start + 1.0)], SO100_JOINTS)))  # fmt: skip
        played = rest._trajectory
        assert played.before_velocity is None  # nothing read: the first segment is a straight line
        slope = (start + 1.0 - played.before) / (played.start_s + 1.0 - played.before_s)
        for t in (0.1, 0.5, 0.9):  # the same velocity all the way: a step from the arm's at acceptance
            np.testing.assert_allclose(played.velocity(played.before_s + t), slope, atol=1e-9)
        expected = ("/rest/arm_sim starts each trajectory from the measured position at rest (its state_interfaces "
                    "['position'] lack velocity), but controller_starts_from is measured: set controller_starts_from: "
                    "measured_at_rest")  # fmt: skip
        for settings in ({"trajectory_action": action}, {"trajectory_topic": "/rest/arm_controller/joint_trajectory"}):
            io = arm_io_of(arm, settings)
            assert run_on(arm, io.misconfigured(io.readings.limits())) == expected
            io.destroy()


def test_a_controller_starting_from_its_command_is_read_on_its_controller_state(arm):
    """arm_sim with interpolate_from_desired_state starts from its command and publishes JTC's ~/controller_state:
    controller_starts_from commanded agrees, and the command is read from the node found serving the action, where
    the arm is (a perfect servo), at rest. A controller whose parameters say it starts from the measured state (the
    module's arm) is refused for commanded, and its command is not followed."""
    with another_arm(arm, "/cmd", interpolate_from_desired_state=True) as commanding:
        io = arm_io_of(arm, {"controller_starts_from": "commanded",
                             "trajectory_action": "/cmd/arm_controller/follow_joint_trajectory"})  # fmt: skip
        ctl = io.controllers[0]  # its one controller
        assert run_on(arm, io.misconfigured(io.readings.limits())) == ""
        assert ctl.controller.command.topic == "/cmd/arm_sim/controller_state"
        here, zeros = commanding._trajectory.sample(commanding._now()), np.zeros(len(SO100_JOINTS))
        wait_until(lambda: io.command_now(zeros, zeros) is not None, 10.0, "the controller's command")
        positions, velocities = io.command_now(zeros, zeros)
        np.testing.assert_allclose(positions, here, atol=1e-9)
        np.testing.assert_array_equal(velocities, 0.0)
        io.destroy()
    io = arm_io_of(arm, {"controller_starts_from": "commanded"})
    ctl = io.controllers[0]  # its one controller
    assert "starts each trajectory from the measured state" in run_on(arm, io.misconfigured(io.readings.limits()))
    assert ctl.controller.command.topic == ""
    io.destroy()


def test_a_server_without_a_controllers_parameters_is_taken_at_the_users_word(arm, capfd):
    """A FollowJointTrajectory server that is no joint_trajectory_controller (a vendor's driver: no state_interfaces
    parameter) cannot say where it starts a trajectory: nothing is refused, and the node warns it took
    controller_starts_from as said."""
    driver = Node("vendor_driver", context=arm.node.context)
    server = ActionServer(driver, FollowJointTrajectory, "vendor/follow_joint_trajectory",
                          execute_callback=lambda handle: FollowJointTrajectory.Result())  # fmt: skip
    arm.client.executor.add_node(driver)
    try:
        io = arm_io_of(arm, {"trajectory_action": "/vendor/follow_joint_trajectory"})
        ctl = io.controllers[0]  # its one controller
        assert run_on(arm, io.misconfigured(io.readings.limits())) == ""
        warning = "cannot read where /vendor_driver starts a trajectory (it has no joint_trajectory_controller " \
            "parameters): taking controller_starts_from: measured as said"  # fmt: skip
        wait_until(lambda: warning in capfd.readouterr().err, 5.0, "the warning")
        ctl._client.destroy()
    finally:
        arm.client.executor.remove_node(driver)
        server.destroy()
        driver.destroy_node()
