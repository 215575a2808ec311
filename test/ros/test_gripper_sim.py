"""`gripper_sim` through real rclpy nodes, as a GripperActionController behaves: a goal moves the jaw at its velocity to
the position (clamped to its limits) and SUCCEEDS reached; a newer goal preempts the active one (CANCELED, not
reached) and the jaw turns toward the new position; a cancel stops it where it is; its joint_states name only its
joint. The instruction node refuses a gripper_joint_names that is not one action joint, naming the parameter. The
same through ParallelGripperCommand, the action of parallel_gripper_controllers (Jazzy on; the only one from Kilted).
What a real jaw meets: an object stalls it (GripperActionController's two ends of a stall) one way, motors switched
off stall it both ways, a switched-off controller takes goals and ends none (and its controller manager, asked first,
names it), a refusing one is counted in a row; our gripper client reads each as the instruction goal's outcome needs
it."""

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from control_msgs.action import GripperCommand, ParallelGripperCommand
from manager_stand_in import ControllerManager
from rclpy.action import ActionServer, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_harness import send_goal, set_parameter, spin_nodes, wait_for, wait_until
from sensor_msgs.msg import JointState

from oxygen_ros.nodes.gripper_io import GripperIO
from oxygen_ros.nodes.gripper_sim import GripperSim
from oxygen_ros.nodes.instruction_node import InstructionNode

SPEED, LOWER, UPPER = 2.0, 0.0, 1.5
ACTION = "/gripper_controller/gripper_cmd"


@contextmanager
def _jaw_at(ros_context, speed: float, **more) -> Iterator[Node]:
    """gripper_sim moving its jaw at ``speed`` (``more``: its other parameters), and a client node keeping its joint
    states."""
    node = GripperSim(context=ros_context, parameter_overrides=[
        Parameter(name, value=value) for name, value in {"velocity": speed, "lower": LOWER, "upper": UPPER,
                                                         "state_rate_hz": 50.0, **more}.items()])  # fmt: skip
    client = Node("gripper_test_client", context=ros_context)
    client.states = []
    client.create_subscription(JointState, "/joint_states", client.states.append, 100)
    with spin_nodes(ros_context, node, client):
        wait_until(lambda: client.states, 5.0, "the jaw's state")
        yield client


@pytest.fixture
def jaw(ros_context):
    with _jaw_at(ros_context, SPEED) as client:
        yield client


@pytest.fixture
def slow_jaw(ros_context):
    """5 s from one end to the other: a goal still moves when the next one (a new client, discovery first) comes."""
    with _jaw_at(ros_context, 0.3) as client:
        yield client


def _goal(position: float) -> GripperCommand.Goal:
    goal = GripperCommand.Goal()
    goal.command.position, goal.command.max_effort = position, 5.0
    return goal


def _gripper(node: Node, deadband: float = 0.005) -> GripperIO:
    """Our gripper client, taking a goal that stood 1.2 s without a word for a controller switched off."""
    return GripperIO(node, {"gripper_action_type": "GripperCommand", "gripper_max_effort": 5.0,
                            "gripper_deadband": deadband, "gripper_stall_timeout": 0.2},
                     "gripper", ACTION, ReentrantCallbackGroup())  # fmt: skip


def test_a_goal_moves_the_jaw_at_its_velocity_to_the_clamped_position(jaw):
    start = time.monotonic()
    out = send_goal(jaw, GripperCommand, ACTION, _goal(9.0)).result(timeout=10.0)  # past the upper limit
    took = time.monotonic() - start
    assert out.status == GoalStatus.STATUS_SUCCEEDED and out.result.reached_goal
    assert out.result.position == pytest.approx(UPPER, abs=1e-3) and took >= UPPER / SPEED * 0.9
    assert {tuple(m.name) for m in jaw.states} == {("gripper",)}
    assert jaw.states[-1].position[0] == pytest.approx(UPPER, abs=1e-3)


def test_a_newer_goal_preempts_and_a_cancel_stops_the_jaw_where_it_is(slow_jaw):
    jaw = slow_jaw
    first = send_goal(jaw, GripperCommand, ACTION, _goal(UPPER))
    wait_until(lambda: jaw.states[-1].position[0] > LOWER + 0.05, 5.0, "the jaw opening")
    second = send_goal(jaw, GripperCommand, ACTION, _goal(LOWER))
    ended = first.result(timeout=10.0)
    assert ended.status == GoalStatus.STATUS_CANCELED and not ended.result.reached_goal
    assert second.result(timeout=10.0).status == GoalStatus.STATUS_SUCCEEDED
    third = send_goal(jaw, GripperCommand, ACTION, _goal(UPPER))
    wait_until(lambda: jaw.states[-1].position[0] > LOWER + 0.05, 5.0, "the jaw opening again")
    third.cancel()
    assert third.result(timeout=10.0).status == GoalStatus.STATUS_CANCELED
    wait_until(lambda: jaw.states[-1].position[0] == jaw.states[-2].position[0], 2.0, "the jaw standing")
    held, seen = jaw.states[-1].position[0], len(jaw.states)
    assert LOWER < held < UPPER - 0.1
    wait_until(lambda: len(jaw.states) > seen + 10, 5.0, "ten more states")
    assert all(state.position[0] == pytest.approx(held, abs=1e-9) for state in jaw.states[seen:])


@pytest.mark.parametrize("overrides, message", [
    ({"gripper_joint_names": ["jaw"]}, "parameter gripper_joint_names must name action_joint_names"),
    ({"gripper_joint_names": ["a", "c"]}, "2 gripper_joint_names need as many gripper_actions"),
    ({"gripper_joint_names": ["a", "c"], "gripper_actions": ["g"]}, "parameter gripper_actions must name one server "
     "per gripper_joint_names joint (2)"),
    ({"gripper_joint_names": ["a", "b", "c"], "gripper_actions": ["g", "h", "i"]}, "gripper_joint_names leave no "
     "action joint to the trajectory"),
    ({"trajectory_actions": ["l", "r"]}, "parameter trajectory_joint_counts must be one count of at least 1 per "
     "trajectory_actions server (2), adding up to the trajectory's 3 joints"),
    ({"trajectory_actions": ["l", "r"], "trajectory_joint_counts": [1, 1]}, "adding up to the trajectory's 3"),
    ({"trajectory_actions": ["l", "r"], "trajectory_joint_counts": [3, 0]}, "one count of at least 1"),
    ({"trajectory_joint_counts": [3]}, "parameter trajectory_joint_counts needs trajectory_actions"),
    ({"trajectory_actions": ["l"], "trajectory_joint_counts": [3], "trajectory_topic": "t"}, "parameter "
     "trajectory_topic plays every joint on one controller"),
])  # fmt: skip
def test_grippers_and_controllers_that_do_not_add_up_to_the_action_joints_stop_the_start(ros_context, overrides,
                                                                                         message):  # fmt: skip
    """Each jaw of its own controller needs its server, and a controller per arm its share of the trajectory's
    joints: a start that cannot say which controller plays a joint fails, naming the parameter."""
    with pytest.raises(ValueError, match=re.escape(message)):
        InstructionNode(context=ros_context, parameter_overrides=[
            Parameter("action_joint_names", value=["a", "b", "c"]),
            *(Parameter(name, value=value) for name, value in overrides.items())])  # fmt: skip


def test_a_jaw_inside_the_trajectory_named_absolute_stays_absolute_among_deltas(ros_context):
    """A jaw the arm's controller moves (no gripper controller) under joint_delta: named in absolute_joint_names,
    its action is its target (openpi's DeltaActions mask); any other joint's is the state plus it. A name that is no
    action joint stops the start."""
    node = InstructionNode(context=ros_context, parameter_overrides=[
        Parameter("action_joint_names", value=["a", "jaw"]), Parameter("action_space", value="joint_delta"),
        Parameter("absolute_joint_names", value=["jaw"])])  # fmt: skip
    try:
        np.testing.assert_allclose(node.arm.map.to_joints(np.array([[0.1, 0.7]]), np.array([1.0, 0.2])), [[1.1, 0.7]])
    finally:
        node.destroy_node()
    with pytest.raises(ValueError, match=r"parameter absolute_joint_names must name action_joint_names, got \['b'\]"):
        InstructionNode(context=ros_context, parameter_overrides=[
            Parameter("action_joint_names", value=["a", "jaw"]),
            Parameter("absolute_joint_names", value=["b"])])  # fmt: skip


def test_a_hold_keeps_the_grip_and_sends_nothing_more(ros_context, jaw):
    """A GripperActionController answers a cancel by commanding the measured position at its default effort, which
    would let go of what the jaw squeezes: a hold cancels nothing (the last goal finishes) and stops new goals."""
    node = Node("gripper_io_test", context=ros_context)
    gripper = _gripper(node)
    with spin_nodes(ros_context, node):  # destroys the node (and the client) after
        wait_until(lambda: gripper._client.server_is_ready(), 5.0, "the gripper's server")
        start = jaw.states[-1].position[0]
        gripper.command(UPPER, gripper.holds)
        wait_until(lambda: jaw.states[-1].position[0] > start + 0.05, 5.0, "the jaw moving")
        holds = gripper.holds
        gripper.hold()
        gripper.command(LOWER, holds)  # decided on the held plan: dropped
        wait_until(lambda: jaw.states[-1].position[0] == pytest.approx(UPPER, abs=1e-3), 5.0, "the grip kept")
        time.sleep(0.3)
        assert jaw.states[-1].position[0] == pytest.approx(UPPER, abs=1e-3)


def test_the_plans_last_jaw_position_is_sent_even_within_the_deadband(ros_context, jaw):
    """Mid-plan a jaw position within gripper_deadband of the last one sent sends nothing (a steady grip); the
    plan's last one (``settled``) is sent all the same, so the jaw ends where the plan does, and only once."""
    node = Node("gripper_settled_test", context=ros_context)
    gripper = _gripper(node, deadband=0.05)
    sent = []
    real = gripper._client.send_goal_async
    gripper._client.send_goal_async = lambda goal: (sent.append(goal.command.position), real(goal))[1]
    with spin_nodes(ros_context, node):
        wait_until(lambda: gripper._client.server_is_ready(), 5.0, "the gripper's server")
        gripper.command(1.0, gripper.holds)
        wait_until(lambda: jaw.states[-1].position[0] == pytest.approx(1.0, abs=1e-3), 5.0, "the jaw at 1.0")
        gripper.command(1.03, gripper.holds)  # within the deadband: nothing
        for _ in range(2):
            gripper.command(1.03, gripper.holds, settled=True)  # the plan's last: sent once
        wait_until(lambda: jaw.states[-1].position[0] == pytest.approx(1.03, abs=1e-3), 5.0, "the jaw at 1.03")
        assert sent == [1.0, pytest.approx(1.03)]


@pytest.mark.parametrize("allow_stalling", [False, True])
def test_a_jaw_closing_on_an_object_stalls_as_gripper_action_controller_says(ros_context, allow_stalling):
    """Something between the jaws at 0.5 stops a jaw closing from 1.0 toward 0.0 there; after stall_timeout still,
    the goal ends stalled, not reached: ABORTED, or SUCCEEDED with allow_stalling (check_for_success's two ends).
    Our gripper client hears it: its controller answered, stalling our goal 0.5 short below where the jaw stopped
    at 0.5 and none above (an object stops a jaw one way only). Opening, the jaw leaves the object freely."""
    with _jaw_at(ros_context, SPEED, initial_position=1.0, object_position=0.5, stall_timeout=0.3,
                 allow_stalling=allow_stalling) as jaw:  # fmt: skip
        node = Node("gripper_stall_test", context=ros_context)
        gripper = _gripper(node)
        with spin_nodes(ros_context, node):
            wait_until(lambda: gripper._client.server_is_ready(), 5.0, "the gripper's server")
            gripper.begin()
            gripper.command(LOWER, gripper.holds)
            wait_until(lambda: gripper._answers.answered, 5.0, "the controller saying it stalled")
            assert jaw.states[-1].position[0] == pytest.approx(0.5, abs=1e-9)
            assert gripper._answers.stalled_below == (pytest.approx(0.5, abs=1e-9), pytest.approx(0.5, abs=1e-9))
            assert gripper._answers.stalled_above is None and gripper.jammed(0.01) is None
            out = send_goal(jaw, GripperCommand, ACTION, _goal(LOWER)).result(timeout=10.0)
            assert out.status == (GoalStatus.STATUS_SUCCEEDED if allow_stalling else GoalStatus.STATUS_ABORTED)
            assert out.result.stalled and not out.result.reached_goal
            assert out.result.position == pytest.approx(0.5, abs=1e-9)
            out = send_goal(jaw, GripperCommand, ACTION, _goal(0.8)).result(timeout=10.0)
            assert out.status == GoalStatus.STATUS_SUCCEEDED and out.result.reached_goal and not out.result.stalled


def test_a_jaw_whose_motors_are_off_stalls_goals_on_both_sides(ros_context):
    """`torque` false (motors off, the controller running): our goals above and below where the jaw stands both end
    stalled, the jaw never moving, and our client finds the jaw jammed where it stands, and how far short of each
    goal."""
    with _jaw_at(ros_context, SPEED, stall_timeout=0.2, initial_position=1.2, torque=False) as jaw:
        node = Node("gripper_torque_test", context=ros_context)
        gripper = _gripper(node)
        with spin_nodes(ros_context, node):
            wait_until(lambda: gripper._client.server_is_ready(), 5.0, "the gripper's server")
            gripper.begin()
            seen = len(jaw.states)
            for position, side in ((0.9, "stalled_below"), (1.4, "stalled_above")):
                gripper.command(position, gripper.holds)
                wait_until(lambda side=side: getattr(gripper._answers, side) is not None, 5.0, side)
            assert gripper.jammed(0.01) == pytest.approx((1.2, 0.3, 0.2), abs=1e-9)
            assert all(state.position[0] == 1.2 for state in jaw.states[seen:])
            assert gripper.unanswered_s() == 0.0 and gripper.refused == 0  # a controller that runs


def test_a_switched_off_controller_takes_goals_and_never_moves_or_ends_them(ros_context, jaw):
    """`active` false, as `ros2 control switch_controllers --deactivate` leaves a GripperActionController: its
    action server takes our goal, the jaw stays and the goal never ends, so our client finds it kept without a word
    past gripper_stall_timeout + 1 s (and nothing refused); a newer goal still preempts ours (CANCELED: its stand
    still counts). Switched on
    again, the controller holds the jaw where it is and the goal it kept ends ABORTED, not reached; the next goal
    moves the jaw."""
    node = Node("gripper_off_test", context=ros_context)
    gripper = _gripper(node)
    with spin_nodes(ros_context, node):
        wait_until(lambda: gripper._client.server_is_ready(), 5.0, "the gripper's server")
        set_parameter(jaw, "/gripper_sim", "active", False)
        start, seen = jaw.states[-1].position[0], len(jaw.states)
        gripper.begin()
        gripper.command(1.0, gripper.holds)
        wait_until(lambda: gripper.unanswered_s() > 1.2, 5.0, "our goal kept past 1.2 s")
        assert all(state.position[0] == start for state in jaw.states[seen:]) and len(jaw.states) > seen + 50
        assert gripper.refused == 0
        kept = send_goal(jaw, GripperCommand, ACTION, _goal(1.2))  # taken: it preempts ours
        ended = kept.handle.get_result_async()
        wait_until(lambda: gripper._answers.standing is None, 5.0, "ours ended by the newer goal")
        assert not ended.done() and gripper.unanswered_s() > 1.2  # ours stood that long without a word all the same
        set_parameter(jaw, "/gripper_sim", "active", True)
        out = wait_for(ended, 10.0)
        assert out.status == GoalStatus.STATUS_ABORTED and not out.result.reached_goal
        assert out.result.position == pytest.approx(start, abs=1e-9)
        out = send_goal(jaw, GripperCommand, ACTION, _goal(1.2)).result(timeout=10.0)
        assert out.status == GoalStatus.STATUS_SUCCEEDED and out.result.position == pytest.approx(1.2, abs=1e-3)


def test_a_jaw_controller_its_manager_lists_inactive_is_named_before_any_goal(ros_context, jaw):
    """Before a goal sends the jaw anything, our client asks the controller manager in its controller's namespace:
    listed inactive, it says why (a deactivated GripperActionController takes goals and ends none) and how to
    activate it; listed active, or with no manager to ask, nothing. While a goal is unanswered it asks again, its
    reads kept per instruction goal and read again once FRESH_S old."""
    node = Node("gripper_manager_test", context=ros_context)
    gripper = _gripper(node)
    manager = ControllerManager(ros_context, "/", {"arm_controller": "active", "gripper_sim": "inactive"})

    def inactive() -> str:
        return wait_for(node.executor.create_task(gripper.inactive, 2.0), 10.0)

    with spin_nodes(ros_context, node):
        wait_until(lambda: gripper._client.server_is_ready(), 5.0, "the gripper's server")
        assert inactive() == ""  # no manager: not judged
        with spin_nodes(ros_context, manager):
            wait_until(lambda: gripper._activity.managers("/gripper_sim"), 5.0, "the manager's list_controllers")
            said = inactive()
            assert said.startswith("/gripper_sim is inactive, not active (/controller_manager lists it so): it takes "
                                   "goals and never moves the jaw nor ends them"), said  # fmt: skip
            assert said.endswith("activate it (`ros2 control set_controller_state gripper_sim active`, or spawn it "
                                 "active)"), said  # fmt: skip
            manager.states["gripper_sim"] = "active"
            assert inactive() == ""
            # a goal's silent controller: its own reads, kept per instruction goal (``listed`` at the goal's end)
            assert gripper.listed() is None
            gripper.ask_while_silent(2.0)
            wait_until(lambda: gripper.listed() == ("/gripper_sim", "active", "/controller_manager"), 5.0, "a read")
            manager.states["gripper_sim"] = "inactive"
            gripper.ask_while_silent(2.0)  # answered and under FRESH_S old: not asked again
            time.sleep(0.5)
            assert gripper.listed()[1] == "active"
            gripper.begin()  # the next instruction goal: nothing read of its silence yet
            assert gripper.listed() is None
            gripper.ask_while_silent(2.0)
            wait_until(lambda: gripper.listed() == ("/gripper_sim", "inactive", "/controller_manager"), 5.0, "a read")


@pytest.mark.parametrize("active", [False, True])
def test_goals_replaced_faster_than_the_stall_timeout_find_a_switched_off_jaw_by_its_readings(ros_context, jaw,
                                                                                              active):
    """Our goals replaced every 0.1 s (under the controller's stall_timeout, 1 s), 0.2-0.3 above the jaw for 1 s, then
    as far below, and so on, the jaw read back each period: switched off, the controller never ends one, so none
    stands long without a word nor stalls (its answers tell nothing), but the jaw stands while asked away both ways
    past gripper_stall_timeout + 1 s each (``stuck``); switched on, it goes with them and is never stuck."""
    node = Node("gripper_stuck_test", context=ros_context)
    gripper = _gripper(node)
    with spin_nodes(ros_context, node):
        wait_until(lambda: gripper._client.server_is_ready(), 5.0, "the gripper's server")
        assert send_goal(jaw, GripperCommand, ACTION, _goal(0.75)).result(timeout=10.0).result.reached_goal  # mid
        set_parameter(jaw, "/gripper_sim", "active", active)
        try:
            gripper.begin()
            start, began, seen = jaw.states[-1].position[0], time.monotonic(), len(jaw.states)
            for i in range(60):
                turn = 1 if i // 10 % 2 == 0 else -1
                gripper.command(start + turn * (0.2 + 0.01 * (i % 10)), gripper.holds)
                time.sleep(0.1)
                gripper.observe(jaw.states[-1].position[0], gripper._now(), 0.03)
                if gripper.stuck() is not None:
                    break
        finally:
            set_parameter(jaw, "/gripper_sim", "active", True)
        moved = np.abs(np.array([m.position[0] for m in jaw.states[seen:]]) - start).max()
        assert gripper._answers.asked is not None and gripper.refused == 0
        if active:
            assert gripper.stuck() is None and moved > 0.15
            return
        where, above_s, below_s = gripper.stuck()
        assert where == start and moved == 0.0 and min(above_s, below_s) > 1.2 and time.monotonic() - began < 5.5
        assert gripper.unanswered_s() == 0.0 and gripper.jammed(0.03) is None  # its answers alone tell nothing


def test_goals_a_gripper_refuses_are_counted_in_a_row(ros_context):
    """A gripper server that refuses our goals: each refusal is counted (the instruction node ends the goal at
    max_missed_chunks in a row) and the same position goes out again at the next command, not only once the plan
    moves past the deadband; one taken goal starts the count afresh."""
    server = Node("refusing_gripper", context=ros_context)
    answers = iter([GoalResponse.REJECT, GoalResponse.REJECT, GoalResponse.ACCEPT])
    ActionServer(server, GripperCommand, ACTION, execute_callback=lambda handle: GripperCommand.Result(),
                 goal_callback=lambda _: next(answers, GoalResponse.REJECT),
                 callback_group=ReentrantCallbackGroup())  # fmt: skip
    node = Node("gripper_refused_test", context=ros_context)
    gripper = _gripper(node)
    with spin_nodes(ros_context, server, node):
        wait_until(lambda: gripper._client.server_is_ready(), 5.0, "the gripper's server")
        for refused in (1, 2):
            gripper.command(1.0, gripper.holds)
            wait_until(lambda: gripper.refused == refused, 5.0, f"{refused} refused")  # noqa: B023
        gripper.command(1.0, gripper.holds)  # the same position: taken this time
        wait_until(lambda: gripper._newest, 5.0, "the goal taken")
        assert gripper.refused == 0


def test_a_parallel_gripper_controllers_action_moves_the_jaw_too(ros_context):
    """gripper_action_type ParallelGripperCommand: the jaw's goals are JointStates (its first position the target,
    an effort only when one is set), their results JointStates; a goal with no position is rejected; an unknown
    action type is refused at start, naming the parameter, and so is a GripperCommand gripper without an effort."""
    jaw = GripperSim(context=ros_context, parameter_overrides=[
        Parameter("velocity", value=SPEED), Parameter("lower", value=LOWER), Parameter("upper", value=UPPER),
        Parameter("action_type", value="ParallelGripperCommand")])  # fmt: skip
    node = Node("parallel_gripper_io_test", context=ros_context)
    node.states = []
    node.create_subscription(JointState, "/joint_states", node.states.append, 100)
    settings = {"gripper_action_type": "ParallelGripperCommand", "gripper_max_effort": 0.0, "gripper_deadband": 0.005,
                "gripper_stall_timeout": 1.0}  # fmt: skip
    gripper = GripperIO(node, settings, "gripper", ACTION, ReentrantCallbackGroup())
    with spin_nodes(ros_context, jaw, node):
        wait_until(lambda: gripper._client.server_is_ready() and node.states, 5.0, "the gripper's server")
        gripper.command(1.0, gripper.holds)
        wait_until(lambda: node.states[-1].position[0] == pytest.approx(1.0, abs=1e-3), 5.0, "the jaw at 1.0")
        with pytest.raises(RuntimeError, match="rejected"):
            send_goal(node, ParallelGripperCommand, ACTION, ParallelGripperCommand.Goal())
        out = send_goal(node, ParallelGripperCommand, ACTION, ParallelGripperCommand.Goal(
            command=JointState(name=["gripper"], position=[0.5]))).result(timeout=10.0)  # fmt: skip
        assert out.status == GoalStatus.STATUS_SUCCEEDED and out.result.reached_goal
        assert out.result.state.position[0] == pytest.approx(0.5, abs=1e-3)
    bad, group = Node("bad_gripper_io_test", context=ros_context), ReentrantCallbackGroup()
    try:
        with pytest.raises(ValueError, match="parameter gripper_action_type must be one of"):
            GripperIO(bad, settings | {"gripper_action_type": "Gripper"}, "gripper", ACTION, group)
        # a GripperCommand's max_effort 0: an effort-interface controller would clamp the jaw's effort to nothing
        with pytest.raises(ValueError, match="parameter gripper_max_effort must be above 0 for GripperCommand goals"):
            GripperIO(bad, settings | {"gripper_action_type": "GripperCommand"}, "gripper", ACTION, group)
    finally:
        bad.destroy_node()
