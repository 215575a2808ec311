"""Every control period the VLA path compares the measured arm with where its plan has it: an arm over
max_tracking_error from its plan (blocked, or a controller that dropped or stalled the trajectory) ends the goal at
once, OUT_OF_RANGE, with the arm held where it is measured (not driven on to where the plan has it); a gripper may
stall on what it holds."""

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
from rclpy.node import Node

from oxygen_ros.control.arm.action_queue import ActionQueue
from oxygen_ros.control.arm.jaw_answers import JawAnswers
from oxygen_ros.control.arm.joint_limits import JointLimit
from oxygen_ros.control.arm.safety import SafeTargets
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.msg import ActionChunk
from oxygen_ros.srv import Infer
from oxygen_ros.nodes.trajectory_controller import Fault
from oxygen_ros.nodes.vla_arm import ArmPlan, VlaArm

SETTINGS = {"send_lead_s": 0.1, "max_missed_chunks": 3, "input_timeout_s": 0.5, "answer_wait_s": 1.0}


class Arm:
    """What VlaArm.tick reads of ArmIO: the measured joints, the clock, faults, the controllers, the grippers, and
    the holds asked."""

    names, target = ("shoulder", "elbow", "jaw"), "/arm_controller/joint_trajectory"
    acceleration_unset = ()  # (joint_acceleration_limits given for every trajectory joint)

    def __init__(self, measured: list[float], gripper_column: int | None = None) -> None:
        self.position, self.holds, self.clock = np.array(measured), [], 10.0
        self.gripper_columns = [] if gripper_column is None else [gripper_column]
        self.readings = self  # (ArmIO.readings: the joint states and the clock)
        self.controllers = [SimpleNamespace(target=self.target, columns=[i for i in range(3) if i != gripper_column])]
        self.read_at: float | None = None  # when the position was read (None: now)
        self.gripper = SimpleNamespace(holds=0, refused=0, unanswered_s=lambda: 0.0, command=lambda *_, **__: None,
                                       jammed=lambda floor: None, observe=lambda *_: None, stuck=lambda: None,
                                       target="/gripper_controller/gripper_cmd", listed=lambda: None,
                                       ask_while_silent=lambda wait_s: None)  # fmt: skip
        self.grippers = [self.gripper] if self.gripper_columns else []
        self.tolerances = {"max_tracking_error": np.full(3, 0.3)}  # instruction_node's default for every joint

    def take_faults(self) -> list:
        return []

    def slowed(self) -> str:
        return ""

    def measured(self, names) -> np.ndarray:
        return self.position

    def reading(self, names) -> tuple[np.ndarray, float]:
        return self.position, self.read_at if self.read_at is not None else self.clock

    def now(self) -> float:
        return self.clock

    def hold(self, at, log, *, velocity=None) -> None:
        self.holds.append(None if at is None else np.array(at))


class Run:
    running, ended = True, None

    def end(self, code=None, message="") -> None:
        self.running, self.ended = False, (code, message)


def planned(rows: list[list[float]], limits: list[JointLimit] | None = None) -> ArmPlan:
    """A plan playing ``rows`` (one every 0.1 s) from node-clock 10.0 on, as sent then: at rest at each target, so
    halfway between two it is halfway from one to the other."""
    queue = ActionQueue(0.1, 0.3)
    queue.origin, queue.first = 10.0, 0
    targets = np.array(rows)
    queue.told(targets, np.zeros_like(targets), 0.1 * np.arange(len(rows)), 10.0, targets[0], None)
    return ArmPlan(queue, horizon=len(rows), threshold=1, limits=limits or [JointLimit(-3.0, 3.0, 2.0)] * 3,
                   action_dim=3)  # fmt: skip


def test_an_arm_that_does_not_follow_its_plan_ends_the_goal_held_where_it_is(ros_context):
    node = Node("arm_tracking_test", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.4, 0.0, 0.0], [0.6, 0.0, 0.0]]
        arm, run = Arm([0.3, 0.0, 0.0]), Run()
        vla = VlaArm(node, arm, SETTINGS)
        arm.clock = 10.15  # the plan has the shoulder at 0.3: following
        vla.tick(run, planned(rows))
        assert run.running and not arm.holds
        arm.clock = 10.25  # the plan has it at 0.5; measured 0.3 is 0.2 behind: within the bound, following
        vla.tick(run, planned(rows))
        assert run.running
        arm.position = np.array([0.0, 0.0, 0.0])  # the controller dropped the trajectory: 0.5 behind
        plan = planned(rows)
        vla.tick(run, plan)
        assert run.ended[0] == ErrorCode.OUT_OF_RANGE and "joint shoulder is 0.500" in run.ended[1]
        assert arm.holds == [None] and plan.queue.rows is None  # held where measured; the plan forgotten
    finally:
        node.destroy_node()


def test_an_arm_found_not_following_as_a_chunk_comes_ends_the_goal_held_where_it_is(ros_context):
    """The tracking check also runs as a chunk is merged into the plan: found there (the arm blocked between two
    clock ticks) the goal ends as the clock's check ends it, not a missed chunk that the next one, planned from the
    blocked pose at rest, would reset while the arm pushes on."""
    node = Node("arm_tracking_chunk_test", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.4, 0.0, 0.0], [0.6, 0.0, 0.0]]
        arm, run, plan = Arm([0.0, 0.0, 0.0]), Run(), planned(rows)
        arm.tolerances |= {"limit_margin": np.zeros(3)}
        arm.map = SimpleNamespace(to_joints=lambda actions, origin: actions)
        vla = VlaArm(node, arm, SETTINGS)
        arm.clock = 10.25  # the plan has the shoulder at 0.5; it stands at 0
        chunk = ActionChunk(horizon=4, action_dim=3, period_s=0.1, actions=np.ravel(rows).tolist())
        executing = vla.execute(run, plan, Infer.Response(actions=chunk), 10.2, 10.2, np.zeros(3), 0.05)
        with pytest.raises(StopIteration) as returned:  # nothing was sent: it returns before its first await
            executing.send(None)
        assert returned.value.value is None  # not a miss
        assert run.ended[0] == ErrorCode.OUT_OF_RANGE and "the arm is not following" in run.ended[1]
        assert arm.holds == [None] and plan.queue.rows is None  # held where measured; the plan forgotten
    finally:
        node.destroy_node()


def test_a_chunk_answered_after_the_hold_that_ends_the_goal_is_sent_nothing(ros_context):
    """A hold that ends the goal (a cancel, a fault, a tracking error) may take the plan's lock before the goal's end
    is marked: a chunk merged after it would be planned from the arm at rest and sent, moving it again. Held for good,
    the plan takes no chunk: execute returns before its first await, nothing merged, nothing more held or sent."""
    node = Node("arm_closed_plan_test", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.4, 0.0, 0.0], [0.6, 0.0, 0.0]]
        arm, run, plan = Arm([0.0, 0.0, 0.0]), Run(), planned(rows)
        arm.map = SimpleNamespace(to_joints=lambda actions, origin: actions)
        vla = VlaArm(node, arm, SETTINGS)
        vla.hold(plan)  # the goal's ending hold; run.end has not run yet
        assert plan.closed and run.running and len(arm.holds) == 1
        chunk = ActionChunk(horizon=4, action_dim=3, period_s=0.1, actions=np.ravel(rows).tolist())
        executing = vla.execute(run, plan, Infer.Response(actions=chunk), 10.0, 10.0, np.zeros(3), 0.05)
        with pytest.raises(StopIteration) as returned:  # nothing was sent: it returns before its first await
            executing.send(None)
        assert returned.value.value is None  # not a miss either
        assert plan.queue.rows is None and len(arm.holds) == 1 and not plan.sending
    finally:
        node.destroy_node()


def test_a_trajectory_that_cannot_be_sent_ends_the_goal_with_the_arm_held(ros_context):
    """The send itself raising (the controller's action client torn down): the arm is held and the goal ends
    INTERNAL saying why, rather than running on with a plan held for good that takes no chunk (it would end
    'succeeded' with the arm standing)."""
    node = Node("arm_send_raises_test", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.4, 0.0, 0.0], [0.6, 0.0, 0.0]]
        arm, run, plan = Arm([0.0, 0.0, 0.0]), Run(), planned(rows)
        arm.map = SimpleNamespace(to_joints=lambda actions, origin: actions)

        async def broken(start, safe, wanted=lambda: True):
            raise RuntimeError("the action client is gone")

        arm.send = broken
        vla = VlaArm(node, arm, SETTINGS)
        vla._checked = lambda plan, commanded, moving, times: (  # (the checks themselves are tested elsewhere)
            SafeTargets(np.array(rows, dtype=float), np.zeros((4, 3)), times, 0), np.zeros(3), None)
        chunk = ActionChunk(horizon=4, action_dim=3, period_s=0.1, actions=np.ravel(rows).tolist())
        executing = vla.execute(run, plan, Infer.Response(actions=chunk), 10.0, 10.0, np.zeros(3), 0.05)
        with pytest.raises(RuntimeError, match="the action client is gone"):
            executing.send(None)
        assert run.ended == (ErrorCode.INTERNAL, "the trajectory could not be sent: RuntimeError: the action client "
                             "is gone")  # fmt: skip
        assert plan.closed and len(arm.holds) == 1 and plan.queue.rows is None
    finally:
        node.destroy_node()


@pytest.mark.parametrize("stale", ["state", "frame"])
def test_a_chunk_whose_inputs_are_older_than_any_answer_on_time_can_be_is_missed_unplayed(ros_context, stale):
    """The goal's first chunk is asked for without a deadline (its probe may wait up to infer_timeout_s): one that
    comes later than any chunk could on time (input_timeout_s + the longest deadline a chunk is asked with + the
    answer's slack: 0.5 + 3 x 0.1 + 1.0 s here) would play the rest of its targets from a scene that may have
    changed. Its joint states or its frames too old, it is a missed chunk, nothing merged nor sent."""
    node = Node(f"arm_stale_chunk_test_{stale}", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.4, 0.0, 0.0], [0.6, 0.0, 0.0]]
        arm, run, plan = Arm([0.0, 0.0, 0.0]), Run(), planned(rows)
        plan.queue.hold(10.0)  # held, nothing planned (the chunk is refused for its age before any merge)
        vla = VlaArm(node, arm, SETTINGS)
        assert vla.max_input_age(plan) == pytest.approx(1.8)
        arm.clock = 12.1
        chunk = ActionChunk(horizon=4, action_dim=3, period_s=0.1, actions=np.ravel(rows).tolist())
        observed_at, frame_at = (10.2, 12.0) if stale == "state" else (12.0, 10.2)  # 1.9 s old
        executing = vla.execute(run, plan, Infer.Response(actions=chunk), observed_at, frame_at, np.zeros(3), 1.8)
        with pytest.raises(StopIteration) as returned:
            executing.send(None)
        code, why = returned.value.value
        assert code == ErrorCode.DEADLINE_EXCEEDED and "inputs were 1.90 s old" in why, why
        assert run.running and plan.queue.rows is None and not arm.holds  # a miss: the caller counts it and holds
    finally:
        node.destroy_node()


def test_a_chunk_whose_inputs_are_just_within_the_bound_is_merged_and_checked(ros_context):
    """Its targets are played: the chunk is merged and goes on to the arm's checks (here refused there,
    on purpose, to show it got that far)."""
    node = Node("arm_stale_chunk_within_test", context=ros_context)
    try:
        arm, run = Arm([0.0, 0.0, 0.0]), Run()
        plan = ArmPlan(ActionQueue(0.1, 0.3), horizon=40, threshold=20, limits=[JointLimit(-3.0, 3.0, 2.0)] * 3,
                       action_dim=3)  # fmt: skip
        plan.queue.origin = 10.0
        vla = VlaArm(node, arm, SETTINGS)
        assert vla.max_input_age(plan) == pytest.approx(3.5)  # 0.5 + 20 x 0.1 + 1.0
        arm.clock = 13.4
        arm.map = SimpleNamespace(to_joints=lambda actions, origin: actions)

        def refused(*_):
            raise EngineError(ErrorCode.OUT_OF_RANGE, "reached the arm's checks")

        vla._checked = refused
        chunk = ActionChunk(horizon=40, action_dim=3, period_s=0.1, actions=[0.0] * 120)
        executing = vla.execute(run, plan, Infer.Response(actions=chunk), 10.2, 10.2, np.zeros(3), 3.0)  # 3.2 s
        with pytest.raises(StopIteration) as returned:
            executing.send(None)
        assert returned.value.value == (ErrorCode.OUT_OF_RANGE, "reached the arm's checks")
    finally:
        node.destroy_node()


def test_an_arm_pushed_off_where_its_run_out_plan_holds_it_ends_the_goal(ros_context):
    """Past its plan's end (an underrun: no chunk came) the controller holds the last target: an arm measured there
    runs on; one pushed off it over max_tracking_error (a person, a collision) ends the goal, held where it is,
    rather than standing unwatched until the next chunk or the goal's end."""
    node = Node("arm_tracking_rest_test", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.2, 0.0, 0.0]]
        arm, run, plan = Arm([0.2, 0.0, 0.0]), Run(), planned(rows)
        vla = VlaArm(node, arm, SETTINGS)
        arm.clock = 10.5  # 0.4 s past the plan's end
        vla.tick(run, plan)
        assert run.running and not arm.holds
        arm.position = np.array([0.2, -0.4, 0.0])  # the elbow pushed 0.4 off where the controller holds it
        vla.tick(run, plan)
        assert run.ended[0] == ErrorCode.OUT_OF_RANGE and "joint elbow is 0.400" in run.ended[1]
        assert arm.holds == [None]
    finally:
        node.destroy_node()


def test_each_joint_is_held_to_its_own_tracking_error(ros_context):
    """joint_max_tracking_errors: a prismatic joint (m; here the one named elbow) beside revolute joints (rad) gets a
    bound in its own units; 0.1 m behind its plan is within the revolute joints' 0.3 but over its own 0.05."""
    node = Node("arm_tracking_per_joint_test", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.0, 0.2, 0.0], [0.0, 0.4, 0.0]]
        arm, run = Arm([0.0, 0.2, 0.0]), Run()
        arm.clock = 10.15  # the plan has the lift at 0.3; measured 0.2
        VlaArm(node, arm, SETTINGS).tick(run, planned(rows))
        assert run.running and not arm.holds
        arm.tolerances = {"max_tracking_error": np.array([0.3, 0.05, 0.3])}
        VlaArm(node, arm, SETTINGS).tick(run, planned(rows))
        assert run.ended[0] == ErrorCode.OUT_OF_RANGE
        assert "joint elbow is 0.100 from where its plan has it, over its max_tracking_error 0.05" in run.ended[1]
        assert arm.holds == [None]
    finally:
        node.destroy_node()


def test_a_reading_is_compared_with_where_the_plan_had_the_arm_when_it_was_read(ros_context):
    """Joint states arrive every so often: a reading 0.25 s old of an arm following its 2 rad/s plan is 0.5 behind
    where the plan has it now, over max_tracking_error, yet exactly where the plan had it then; a wrapped reading of
    a turning wrist (-pi + 0.05 for a plan at pi - 0.05) is 0.1 from it, not a turn."""
    node = Node("arm_tracking_time_test", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.4, 0.0, 0.0], [0.6, 0.0, 0.0], [0.8, 0.0, 0.0]]
        arm, run = Arm([0.2, 0.0, 0.0]), Run()
        arm.clock, arm.read_at = 10.35, 10.1
        VlaArm(node, arm, SETTINGS).tick(run, planned(rows))
        assert run.running and not arm.holds
        wrist = [JointLimit(-3.0, 3.0, 2.0), JointLimit(-math.inf, math.inf, 2.0), JointLimit(-3.0, 3.0, 2.0)]
        arm.position, arm.read_at = np.array([0.0, -math.pi + 0.05, 0.0]), None
        arm.clock = 10.0
        VlaArm(node, arm, SETTINGS).tick(run, planned([[0.0, math.pi - 0.05, 0.0]] * 3, wrist))
        assert run.running and not arm.holds
        VlaArm(node, arm, SETTINGS).tick(run, planned([[0.0, math.pi - 0.05, 0.0]] * 3))  # were it limited: 6.18 off
        assert run.ended[0] == ErrorCode.OUT_OF_RANGE and "joint elbow is 6.183" in run.ended[1]
    finally:
        node.destroy_node()


def test_a_gripper_stalled_on_what_it_holds_is_no_tracking_error(ros_context):
    node = Node("arm_tracking_jaw_test", context=ros_context)
    try:
        arm, run = Arm([0.0, 0.0, 0.05], gripper_column=2), Run()  # the jaw closed on an object at 0.05, not 0.0
        arm.clock = 10.1
        VlaArm(node, arm, SETTINGS).tick(run, planned([[0.0, 0.0, 0.8], [0.0, 0.0, 0.0]]))
        assert run.running and not arm.holds
    finally:
        node.destroy_node()


def test_the_gripper_waits_while_the_arms_trajectory_is_on_its_way(ros_context):
    """The jaw follows rows the arm's controller has taken: while merged rows are being sent (``sending``) it gets
    no command from them, since a refusal would hold the arm with the jaw already moved; send_lead_s ahead, and
    once the plan ends sooner than that, its last target, settled (sent even within the deadband of the last one),
    also after the plan's end."""
    node = Node("arm_tracking_sending_test", context=ros_context)
    try:
        arm, run, commands = Arm([0.0, 0.0, 0.0], gripper_column=2), Run(), []
        arm.gripper.command = lambda position, holds, settled=False: commands.append((position, settled))
        arm.clock = 10.0
        plan = planned([[0.0, 0.0, 0.0], [0.0, 0.0, 0.4], [0.0, 0.0, 0.8]])
        vla = VlaArm(node, arm, SETTINGS)
        plan.sending = True
        vla.tick(run, plan)
        assert commands == [] and run.running
        plan.sending = False  # taken
        vla.tick(run, plan)
        assert commands == [(pytest.approx(0.4), False)]  # send_lead_s ahead
        for clock in (10.15, 10.5):  # the plan ends at 10.2: its last target, before and after
            arm.clock = clock
            vla.tick(run, plan)
        assert commands[1:] == [(pytest.approx(0.8), True)] * 2 and run.running
    finally:
        node.destroy_node()


def test_a_controller_slowed_below_the_plans_speed_ends_the_goal_with_the_arm_held(ros_context):
    """A UR's speed slider turned down mid-goal (``ArmIO.slowed``): the plan is timed at full speed, so the goal ends
    FAILED_PRECONDITION at the next period, naming why, with the arm held where it is measured (behind its plan, or
    paused: at 0% a UR plays the stop when resumed, which must not carry the arm on to where the plan was)."""
    node = Node("arm_slowed_test", context=ros_context)
    try:
        arm, run = Arm([0.0, 0.0, 0.0]), Run()
        arm.clock = 10.05
        arm.slowed = lambda: "the controller's speed scaling is 40%"
        VlaArm(node, arm, SETTINGS).tick(run, planned([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0]]))
        assert run.ended == (ErrorCode.FAILED_PRECONDITION, "the controller's speed scaling is 40%")
        assert arm.holds == [None]
    finally:
        node.destroy_node()


@pytest.mark.parametrize("taken_over", [False, True])
def test_a_controller_that_ended_the_trajectory_ends_the_goal_and_no_stop_drives_the_arm_on(ros_context, taken_over):
    """The controller ended our trajectory (``ArmIO.take_faults``): ABORTED (a path tolerance: the arm blocked, held by
    the controller) brakes from where the arm is measured, never on towards where the plan has it (into what
    blocked it); CANCELED (another client's goal preempted ours, or someone cancelled it) the same, the controller
    itself sending nothing then (a stop would preempt the other client's trajectory: test_arm_sim's takeovers)."""
    node = Node("arm_fault_test", context=ros_context)
    try:
        arm, run = Arm([0.0, 0.0, 0.0]), Run()
        arm.clock = 10.05
        why = "/arm ended the trajectory (status 6, error_code -4): path tolerance"
        arm.take_faults = lambda: [Fault(why, taken_over, arm.target)]
        plan = planned([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0]])
        VlaArm(node, arm, SETTINGS).tick(run, plan)
        assert run.ended == (ErrorCode.ABORTED, why)
        assert arm.holds == [None] and plan.queue.rows is None
    finally:
        node.destroy_node()


def test_a_hold_while_the_plan_is_on_its_way_brakes_from_where_the_arm_is(ros_context):
    """Until the controller takes a plan, the arm does not move along it (the controller may refuse it): a hold then
    stops the arm from where it is measured, not from where the plan would have it by now; once taken, from the
    plan."""
    node = Node("arm_hold_sending_test", context=ros_context)
    try:
        arm = Arm([0.0, 0.0, 0.0])
        vla = VlaArm(node, arm, SETTINGS)
        for sending, held in ((True, None), (False, [0.25, 0.0, 0.0])):
            plan = planned([[0.5, 0.0, 0.0], [0.6, 0.0, 0.0]])
            rows = plan.queue.rows  # sent at 9.9 from 0 at rest, the first target due at 10.0:
            plan.queue.told(rows, np.zeros_like(rows), np.array([0.1, 0.2]), 9.9, np.zeros(3), None)
            plan.sending, arm.clock, arm.holds = sending, 9.95, []
            vla.hold(plan)
            assert (arm.holds[0] is None) if held is None else np.allclose(arm.holds[0], held)
    finally:
        node.destroy_node()


def test_fine_motion_the_arm_did_not_follow_is_named_at_the_goals_end(ros_context):
    """A plan moving the elbow 0.2 (inside its 0.3 tracking error) while the arm stands: the tracking check cannot
    see it, the goal's end does (``VlaArm.unmoved``); the same plan followed is motion that happened."""
    node = Node("arm_unmoved_test", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.0, 0.1, 0.0], [0.0, 0.2, 0.0]]
        for share, why in ((0.0, "the arm did not move as planned: joint elbow was planned 0.200 from where the goal "
                                 "started and went 0.000, and no other joint of its controller followed its plan "
                                 "either (is it active and playing /arm_controller/joint_trajectory?)"),
                           (1.0, "")):  # fmt: skip
            arm, run, plan = Arm([0.0, 0.0, 0.0]), Run(), planned(rows)
            vla = VlaArm(node, arm, SETTINGS)
            for t in (10.0, 10.1, 10.2):
                arm.clock, arm.position = t, share * plan.queue.commanded(t)
                vla.tick(run, plan)
            assert run.running and vla.unmoved(plan) == why
        plan = planned(rows)
        plan.sent = 1  # and no period watched it play (sent as the goal's duration ended): nothing moved
        assert VlaArm(node, Arm([0.0, 0.0, 0.0]), SETTINGS).unmoved(plan).startswith("the arm was never seen playing")
    finally:
        node.destroy_node()


def test_one_arm_that_did_not_move_is_named_though_the_other_did(ros_context):
    """Two arms, each on its own controller (the shoulder on the left's, the elbow and jaw on the right's): the left
    following its plan says nothing of the right, which stood: the goal's end names the right's joint and
    controller."""
    node = Node("arm_unmoved_bimanual_test", context=ros_context)
    try:
        rows = [[0.0, 0.0, 0.0], [0.1, 0.1, 0.0], [0.2, 0.2, 0.0]]
        arm, run, plan = Arm([0.0, 0.0, 0.0]), Run(), planned(rows)
        arm.controllers = [SimpleNamespace(target="/left/arm_controller/follow_joint_trajectory", columns=[0]),
                           SimpleNamespace(target="/right/arm_controller/follow_joint_trajectory", columns=[1, 2])]
        vla = VlaArm(node, arm, SETTINGS)
        for t in (10.0, 10.1, 10.2):
            arm.clock, arm.position = t, plan.queue.commanded(t) * [1.0, 0.0, 0.0]
            vla.tick(run, plan)
        assert run.running and vla.unmoved(plan).startswith("the arm did not move as planned: joint elbow was planned "
                                                            "0.200")  # fmt: skip
        assert vla.unmoved(plan).endswith("(is it active and playing /right/arm_controller/follow_joint_trajectory?)")
    finally:
        node.destroy_node()


def test_a_gripper_that_refuses_its_goals_ends_the_goal_with_the_arm_held(ros_context):
    """A gripper controller that refused max_missed_chunks goals in a row (each sent again the next period) would
    refuse the next: the jaw cannot follow the plan, so the goal ends ABORTED with the arm held."""
    node = Node("arm_gripper_refusals_test", context=ros_context)
    try:
        arm, run = Arm([0.0, 0.0, 0.0], gripper_column=2), Run()
        plan, vla = planned([[0.0, 0.0, 0.0], [0.0, 0.0, 0.4]]), VlaArm(node, arm, SETTINGS)
        arm.gripper.refused = 2
        vla.tick(run, plan)
        assert run.running and not arm.holds
        arm.gripper.refused = 3
        vla.tick(run, plan)
        assert run.ended == (ErrorCode.ABORTED, "/gripper_controller/gripper_cmd refused 3 gripper goals in a row "
                             "(max_missed_chunks), the arm holds: the jaw cannot follow the plan")  # fmt: skip
        assert len(arm.holds) == 1
    finally:
        node.destroy_node()


SILENT = ("the gripper did not move: its plan took jaw 0.200 from where it was, it went 0.000, and "
          "/gripper_controller/gripper_cmd kept a goal 2.5 s without saying it reached its position or stalled")
LISTED = ("/gripper_controller", "/controller_manager")


@pytest.mark.parametrize(("went", "stood_s", "state", "unmoved"), [
    (0.0, 2.5, None, f"{SILENT} (is its controller active?)"),  # never moved, a goal 2.5 s unanswered: switched off?
    (0.0, 0.0, None, ""),  # never moved, no goal stood past the stall timeout unanswered: a grip (or goals replaced)
    (0.15, 2.5, None, ""),  # moved over 2% of its 6 rad range (0.12), then stopped: a grip
    (0.0, 2.5, "active", f"{SILENT}, though /controller_manager lists /gripper_controller active: the jaw is held "
     "where it is (its motors off, or by what it grips with the controller's stall check never firing: a velocity "
     "reading noisier than its stall_velocity_threshold)"),  # fmt: skip
    (0.0, 2.5, "inactive", f"{SILENT}; /gripper_controller is inactive, not active (/controller_manager lists it so): "
     "it takes goals and never moves the jaw nor ends them (a GripperActionController deactivated); activate it "
     "(`ros2 control set_controller_state gripper_controller active`, or spawn it active)"),
])  # fmt: skip
def test_a_jaw_that_never_moved_while_its_controller_said_nothing_is_named_at_the_goals_end(ros_context, went,
                                                                                           stood_s, state, unmoved):
    """The arm stands still as its plan has it; the plan's first jaw target is 0.2 from where the jaw was read (a
    jaw may jump there). A jaw on its own controller may stall on what it holds after any distance, so only one that
    never moved, while a goal of ours stood past the controller's stall timeout without its saying reached or
    stalled (``GripperIO.unanswered_s``), makes the goal's motion not happen; its manager, asked meanwhile, says
    whether the controller is off (named, with its remedy) or on, the jaw held (its motors off, or gripping with a
    stall check that never fires)."""
    node = Node(f"arm_unmoved_jaw_test_{state}", context=ros_context)
    try:
        arm, run, plan = Arm([0.0, 0.0, 0.0], gripper_column=2), Run(), planned([[0.0, 0.0, 0.2], [0.0, 0.0, 0.2]])
        asked = []
        arm.gripper.unanswered_s = lambda: stood_s
        arm.gripper.ask_while_silent = asked.append
        arm.gripper.listed = lambda: None if state is None else (LISTED[0], state, LISTED[1])
        vla = VlaArm(node, arm, SETTINGS)
        for t in (10.0, 10.1, 10.2):
            arm.clock, arm.position = t, np.array([0.0, 0.0, went * (t > 10.0)])
            vla.tick(run, plan)
        assert run.running
        assert asked == ([1.0] * 3 if stood_s else [])  # its manager asked while it is silent (answer_wait_s)
        assert vla.unmoved(plan) == unmoved
    finally:
        node.destroy_node()


@pytest.mark.parametrize(("below", "above", "jammed"), [
    ((0.5, 0.3), (0.5, 0.9), True),  # stalled 0.2 short closing and 0.4 short opening, both at 0.5: motors off
    ((0.5, 0.3), None, False),  # closing only: what it holds
    ((0.5, 0.3), (1.2, 1.5), False),  # stalled opening elsewhere: it moved between them
    ((0.5, 0.4), (0.5, 0.6), False),  # 0.1 short each way: under 2% of its 6 rad range (0.12), not a stall of note
])  # fmt: skip
def test_a_jaw_its_controller_stalls_both_ways_at_one_place_ends_the_goal_with_the_arm_held(ros_context, below,
                                                                                           above, jammed):
    """What the jaw's controller said of our gripper goals (``JawAnswers``: the newest stall below and above, each
    (where the jaw stopped, the goal's position)): a goal stalled short below where the jaw stopped and one above,
    both over 2% of its range, at one place, end the goal at the next period with the arm held, naming the jaw and
    what to check; stalls one way only, or at places apart, do not."""
    node = Node("arm_jammed_jaw_test", context=ros_context)
    try:
        arm, run, plan = Arm([0.0, 0.0, 0.5], gripper_column=2), Run(), planned([[0.0, 0.0, 0.5], [0.0, 0.0, 0.5]])
        answers = JawAnswers()
        answers.begin()
        for key, stall in enumerate((below, above)):
            if stall is not None:
                answers.on_ended(answers.generation, bytes([key]), reached_or_stalled=True, now=10.0, stall=stall)
        arm.gripper.jammed = answers.jammed
        vla = VlaArm(node, arm, SETTINGS)
        vla.tick(run, plan)
        if not jammed:
            assert run.running and not arm.holds
            return
        assert run.ended == (ErrorCode.ABORTED, "the gripper cannot move: /gripper_controller/gripper_cmd stalled jaw "
                             "at 0.500, 0.400 short of a goal above and 0.200 short of one below (what a jaw holds "
                             "stops it one way only: are its motors on, is gripper_max_effort enough?), the arm holds")
        assert len(arm.holds) == 1
    finally:
        node.destroy_node()


def test_a_jaw_that_stays_put_while_fast_replaced_goals_ask_it_both_ways_ends_the_goal(ros_context):
    """Goals to the jaw's controller replaced every period (the controller never says stalled, nor keeps one long
    unanswered), asking 0.3 above where it stands for 1 s, then below for 1 s, and so on; the jaw read at 0.5 each
    period: once each way counted over the controller's stall timeout + margin (here 2 s; REACT_S of each second
    aside), the goal ends at the next period with the arm held, naming the jaw and what to check."""
    node = Node("arm_stuck_jaw_test", context=ros_context)
    try:
        arm, run = Arm([0.0, 0.0, 0.5], gripper_column=2), Run()
        plan = planned([[0.0, 0.0, 0.5]] * 2)
        answers = JawAnswers()
        answers.begin()
        arm.gripper.observe = answers.on_measured
        arm.gripper.stuck = lambda: answers.stuck(2.0)
        vla = VlaArm(node, arm, SETTINGS)
        for i in range(100):  # 0.1 s apart
            arm.clock = 10.0 + 0.1 * i
            answers.on_taken(answers.generation, bytes([i]), arm.clock, 0.8 if i // 10 % 2 == 0 else 0.2)
            vla.tick(run, plan)
            if not run.running:
                break
        assert 7.0 < arm.clock - 10.0 < 8.0  # 0.6 s of each second counted: the fourth second below, over 2 s
        assert run.ended[0] == ErrorCode.ABORTED and re.fullmatch(
            r"the gripper cannot move: jaw stayed at 0\.500 while goals to /gripper_controller/gripper_cmd asked it "
            r"away above for 2\.\d s and below for 2\.\d s \(what a jaw holds stops it one way only: is its "
            r"controller active, are its motors on\?\), the arm holds", run.ended[1]), run.ended[1]  # fmt: skip
        assert len(arm.holds) == 1
    finally:
        node.destroy_node()


def test_two_jaws_each_follow_their_own_column_and_each_answers_for_itself(ros_context):
    """A bimanual arm (here one arm joint and two jaws, columns 1 and 2, each on its own gripper controller): each
    jaw gets its own planned position; neither is held to the tracking error; the second refusing every goal ends
    the goal naming it; the first stalled both ways at one place ends it naming that one."""
    node = Node("arm_two_jaws_test", context=ros_context)
    try:
        arm, run, commands = Arm([0.0, 0.0, 0.9]), Run(), {"left": [], "right": []}
        arm.gripper_columns, arm.controllers[0].columns = [1, 2], [0]
        arm.grippers = [SimpleNamespace(holds=0, refused=0, unanswered_s=lambda: 0.0, jammed=lambda floor: None,
                                        observe=lambda *_: None, stuck=lambda: None,
                                        target=f"/{side}_gripper/gripper_cmd",
                                        command=lambda position, holds, settled=False, side=side:
                                        commands[side].append(position))
                        for side in ("left", "right")]  # fmt: skip
        plan = planned([[0.0, 0.0, 0.0], [0.0, 0.4, 0.6], [0.0, 0.8, 1.2]])
        vla = VlaArm(node, arm, SETTINGS)
        vla.tick(run, plan)  # the right jaw 0.9 from a plan at 0.0: a jaw's own controller, not tracked
        assert run.running and commands == {"left": [pytest.approx(0.4)], "right": [pytest.approx(0.6)]}
        arm.grippers[1].refused = SETTINGS["max_missed_chunks"]
        vla.tick(run, plan)
        assert run.ended[0] == ErrorCode.ABORTED and run.ended[1].startswith("/right_gripper/gripper_cmd refused 3")
        run = Run()
        arm.grippers[1].refused = 0
        arm.grippers[0].jammed = lambda floor: (0.5, 0.3, 0.4)
        vla.tick(run, planned([[0.0, 0.0, 0.0], [0.0, 0.4, 0.6]]))
        assert run.ended[1].startswith("the gripper cannot move: /left_gripper/gripper_cmd stalled elbow at 0.500")
    finally:
        node.destroy_node()


@pytest.mark.parametrize("period_s", [0.0, 1e-4, 1.5, math.inf, math.nan])
def test_a_chunk_period_the_arm_cannot_be_watched_at_is_refused(ros_context, period_s):
    """The arm is watched (cancel, faults, tracking) once an action period: a model's period over 1 s, or none,
    would leave it unwatched that long; one under 1 ms would have the clock thread spin."""
    node = Node("arm_period_test", context=ros_context)
    try:
        arm = Arm([0.0, 0.0, 0.0])
        arm.configured = True
        with pytest.raises(EngineError, match=r"period_s must be in \[0.001, 1\]"):
            VlaArm(node, arm, SETTINGS).plan_for(ActionChunk(action_dim=3, horizon=5, period_s=period_s,
                                                             actions=[0.0] * 15))  # fmt: skip
    finally:
        node.destroy_node()


@pytest.mark.parametrize("horizon, actions", [(0, 0), (5, 14), (4_000_000_000, 0), (1001, 3003)])
def test_a_chunk_whose_size_is_out_of_bounds_or_unlike_its_actions_is_refused(ros_context, horizon, actions):
    """A first chunk's horizon sizes the plan's deadlines (the chunk window): bounded, and its actions as many as
    horizon x action_dim, before any plan is made of it."""
    node = Node("arm_horizon_test", context=ros_context)
    try:
        arm = Arm([0.0, 0.0, 0.0])
        arm.configured = True
        chunk = ActionChunk(action_dim=3, horizon=horizon, period_s=0.1, actions=[0.0] * actions)
        with pytest.raises(EngineError, match=r"must be in \[1, 1000\]\) with \d+ actions, not horizon x action_dim"):
            VlaArm(node, arm, SETTINGS).plan_for(chunk)
    finally:
        node.destroy_node()


def test_a_goal_still_preparing_leaves_the_running_goals_plan_and_faults(ros_context):
    """Two goals prepare at once and the later one's probe answers first, so it runs: the other's plan, made as its
    own probe answers, is not the arm's until it starts (``begin``). Neither the running goal's controller faults are
    forgotten for it, nor does a hold stop the arm from its empty plan instead of the running one's."""
    node = Node("arm_preparing_test", context=ros_context)
    try:
        arm, forgotten = Arm([0.0, 0.0, 0.0]), []
        arm.configured, arm.limits = True, lambda: [JointLimit(-3.0, 3.0, 2.0)] * 3
        arm.forget_fault = lambda: forgotten.append(True)
        vla = VlaArm(node, arm, SETTINGS | {"actions_per_chunk": 0, "chunk_threshold": 0, "blend_old_weight": 0.3})
        running = planned([[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.4, 0.0, 0.0]])
        vla.begin(running)
        assert forgotten == [True]
        preparing = vla.plan_for(ActionChunk(action_dim=3, horizon=5, period_s=0.1, actions=[0.0] * 15))
        assert preparing is not running and forgotten == [True]
        arm.clock, there = 10.1, running.queue.commanded(10.1)
        vla.hold(None)  # the running goal ends: braked from where its plan has the arm (then forgets the plan)
        np.testing.assert_allclose(arm.holds[-1], there)
    finally:
        node.destroy_node()
