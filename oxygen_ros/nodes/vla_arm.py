"""The VLA path of a FollowInstruction goal: the model's chunks executed on a ros2_control arm, as robots run them.

Each chunk is asked for with the arm's state (``state_joint_names`` in the model's units: the policy needs it) and
the newest frame; its row 0 is the target after the control step during which that state was read. The arm executes
``actions_per_chunk`` of it; when ``chunk_threshold`` planned targets remain the next chunk is asked for, due before
the plan's last target minus the time a trajectory needs to reach the controller (``send_lead_s``), so inference
overlaps execution (LeRobot's async inference). An arriving chunk is checked (shape, period), merged into the plan
(``control.arm.action_queue``: targets due before now + ``send_lead_s`` dropped while a plan moves the arm; those of
steps an arm stood still, at a goal's start, after a hold or past its plan's end, put off instead; overlapping ones
blended with ``blend_old_weight``), mapped to joint units, checked against the limits the goal started with and
against where the plan has the arm now (``control.arm.safety``; at rest: the measured position, within
``max_start_jump``; moving: the measured position must be within ``max_tracking_error`` of where the plan had the arm
when it was read), and sent as one trajectory on the node clock.
The camera frames a chunk was computed from must have been younger than ``input_timeout_s`` when it was asked for
(the answer names them and their stamp), and latency counts from the older of the frames and the state.

Honest outcomes: a chunk that is late, arrives after all its targets, is malformed, or is refused by the limits or by
the controller is missed (the arm holds where it was refused: where it is measured when it was not following its
plan); ``max_missed_chunks`` in a row end the goal (DEADLINE_EXCEEDED for late chunks, else the refusal's code);
stale joint states, a controller fault (our goal aborted, preempted by another client or cancelled by someone else) or
an arm over ``max_tracking_error`` from its plan at any period (a controller that dropped or stalled the trajectory)
end it at once with the arm held, and so do ``max_missed_chunks`` gripper goals refused in a row and a jaw its
controller stalled both ways at one place (motors off); a goal that never got a chunk to the arm does not succeed,
nor one whose arm (or jaw) never moved as planned (``unmoved``). The result counts chunks sent and missed, underruns,
and the p50 / p99 latency from reading the inputs to the controller taking the trajectory.
"""

import math
import threading
from dataclasses import dataclass, field, replace

import numpy as np
from rclpy.node import Node

from oxygen_ros.control.arm.action_queue import ActionQueue
from oxygen_ros.control.arm.excursion import Excursion
from oxygen_ros.control.arm.joint_limits import JointLimit
from oxygen_ros.control.arm.latency import Latency
from oxygen_ros.control.arm.safety import SafeTargets, check_moving_start, check_targets
from oxygen_ros.control.arm.turns import beside, difference, turning
from oxygen_ros import bounds
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.msg import ActionChunk, ChunkTrace
from oxygen_ros.srv import Infer
from oxygen_ros.nodes.arm_io import ArmIO
from oxygen_ros.nodes.controller_activity import ACTIVE, GRIPPER_INACTIVE, inactive_reason
from oxygen_ros.nodes.goal_run import GoalRun
from oxygen_ros.nodes.infer_client import ANSWER_SLACK_S
from oxygen_ros.nodes.stamps import MAX_CLOCK_SKEW_S, seconds, time_of
from oxygen_ros.nodes.trajectory_controller import HOLD_MIN_S

PARAMETERS = {
    "actions_per_chunk": (0, "actions of each chunk the arm executes (LeRobot's actions_per_chunk / n_action_steps); "
                          "0 = the whole chunk"),  # fmt: skip
    "chunk_threshold": (0, "ask for the next chunk when this many planned actions remain; 0 = half of "
                        "actions_per_chunk"),  # fmt: skip
    "blend_old_weight": (0.3, "where two chunks overlap, old x this + new x (1 - this) (LeRobot's weighted_average); "
                         "0 = the newest chunk only"),  # fmt: skip
    "max_missed_chunks": (3, "chunks (or gripper goals) in a row late or refused before the goal ends (the arm "
                          "holds)"),  # fmt: skip
    "send_lead_s": (0.1, "a trajectory's first target is due at least this long after it is sent (the goal's trip to "
                    "the controller and one controller cycle), seconds"),  # fmt: skip
}
RANGES = {"actions_per_chunk": (0, 10_000), "chunk_threshold": (0, 10_000), "blend_old_weight": (0.0, 0.99),
          "max_missed_chunks": (1, 1000), "send_lead_s": (0.0, 10.0)}  # fmt: skip
POSITIVE = ("send_lead_s",)
MAX_PERIOD_S = 1.0  # a chunk's action period: the arm is watched (cancel, faults, tracking) once a period
MIN_PERIOD_S = 1e-3  # and no faster than a ros2_control loop runs: the clock thread ticks once a period
JAW_MOVED = 0.02  # of the jaw's position range: a jaw that went less never moved (a servo's reading jitters less)
MISSED = "chunk missed"  # how the log says it (the robot suite counts these)


class NotFollowing(EngineError):
    """The measured arm is over max_tracking_error from where its plan has it: blocked, or its controller dropped
    the trajectory."""


@dataclass
class ArmPlan:
    """One goal's execution state on the arm."""

    queue: ActionQueue
    horizon: int  # actions of a chunk the arm executes
    threshold: int  # planned actions left when the next chunk is asked for
    limits: list[JointLimit]  # as the goal started: a description published meanwhile cannot widen them
    action_dim: int
    latency: Latency = field(default_factory=Latency)
    sent: int = 0
    missed: int = 0  # in a row
    missed_total: int = 0
    asked: int = 1  # chunks asked for: the goal's first (the probe) and every one since
    last_request: float = -1e18  # node clock, s
    due_at: float = 0.0  # when the chunk asked for is due (node clock, s)
    awaiting: bool = False
    overdue: bool = False  # the chunk asked for is past due and was counted missed
    last_miss: tuple[ErrorCode, str] = (ErrorCode.DEADLINE_EXCEEDED, "")  # the latest missed chunk's code and why
    sending: bool = False  # merged rows are on their way to the controller, not yet taken: the gripper waits
    closed: bool = False  # held for good (the goal ends): a chunk answered meanwhile is sent nothing
    excursion: Excursion = field(default_factory=Excursion)  # how far the plan and the arm went: did it move?
    lock: threading.Lock = field(default_factory=threading.Lock)  # the queue: the clock thread reads what chunks change

    def ask(self, now: float, deadline_s: float) -> int:
        """A chunk is asked for now, due in ``deadline_s``; returns its number (for ``answered``)."""
        with self.lock:
            self.awaiting, self.overdue, self.last_request, self.due_at = True, False, now, now + deadline_s
            self.asked += 1
            return self.asked

    def answered(self, number: int) -> None:
        """Chunk request ``number`` is over: the next may be asked for, unless a newer one already was (a late answer
        must not clear the mark of the request after it, or two would be in flight)."""
        with self.lock:
            if self.asked == number:
                self.awaiting = False


class VlaArm:
    """The node-side half of the VLA path; ``arm`` speaks to the controller."""

    def __init__(self, node: Node, arm: ArmIO, settings: dict) -> None:
        self._node, self.arm, self._settings = node, arm, settings
        self._traces = node.create_publisher(ChunkTrace, "arm/chunk_trace", 10)
        self._plan: ArmPlan | None = None  # the last goal's: holding after it ended stops the arm as it moved

    def plan_for(self, chunk: ActionChunk) -> ArmPlan:
        """The goal's plan for this model's chunks (the arm's once the goal starts: ``begin``); FAILED_PRECONDITION
        naming what keeps them from the arm: no joints configured or not as many as the chunk has dimensions, a
        horizon out of bounds or unlike its actions, a period the arm cannot be watched at, a joint without limits,
        or stale joint states."""
        if not self.arm.configured:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, "the model sends joint actions but no arm is configured: "
                              "set action_joint_names (and trajectory_action) to the controller's joints")  # fmt: skip
        if len(self.arm.names) != chunk.action_dim:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"the model's {chunk.action_dim} action dimensions need "
                              f"as many action_joint_names, {len(self.arm.names)} are set")  # fmt: skip
        if not 1 <= chunk.horizon <= bounds.CHUNK_HORIZON or len(chunk.actions) != chunk.horizon * chunk.action_dim:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"a chunk of horizon {chunk.horizon} (must be in [1, "
                              f"{bounds.CHUNK_HORIZON}]) with {len(chunk.actions)} actions, not horizon x action_dim "
                              f"{chunk.action_dim}, cannot be executed")  # fmt: skip
        if not MIN_PERIOD_S <= chunk.period_s <= MAX_PERIOD_S:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"a chunk of {chunk.horizon} actions {chunk.period_s} s "
                              f"apart cannot be executed (period_s must be in [{MIN_PERIOD_S:g}, {MAX_PERIOD_S:g}]: "
                              "the arm is watched once a period)")  # fmt: skip
        limits = self.arm.readings.limits()
        slowed = self.arm.slowed()
        if slowed:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, slowed)
        for jaw in self.arm.gripper_columns:  # a jaw moves at its controller's speed, not along the trajectory
            limits[jaw] = replace(limits[jaw], velocity=math.inf, acceleration=math.inf)
        if self.arm.acceleration_unset:  # a URDF has none, and MoveIt 2 refuses to plan without them too
            at_rest = self._settings["controller_starts_from"] == "measured_at_rest"  # (only .inf starts there)
            advice = "with .inf (controller_starts_from measured_at_rest takes no other)" if at_rest else (
                "from the arm's MoveIt joint_limits.yaml (max_acceleration), or .inf for a joint whose driver limits "
                "acceleration itself")  # fmt: skip
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joints {list(self.arm.acceleration_unset)} have no "
                              f"acceleration limit: set joint_acceleration_limits {advice}")
        waived = [name for i, name in enumerate(self.arm.names)
                  if i not in self.arm.gripper_columns and limits[i].acceleration == math.inf]  # fmt: skip
        if waived:  # .inf on purpose: the driver's own limits are all that keeps a stop from jolting
            self._node.get_logger().warning(
                f"joints {waived} have joint_acceleration_limits .inf: chunks are not checked for acceleration and a "
                f"hold brakes within {HOLD_MIN_S:g} s at any speed (a UR protective stop, a Franka reflex)")
        self.arm.readings.measured(self.arm.names)
        s = self._settings
        horizon = min(s["actions_per_chunk"] or chunk.horizon, chunk.horizon)
        threshold = min(s["chunk_threshold"] or max(1, horizon // 2), horizon)
        return ArmPlan(ActionQueue(chunk.period_s, s["blend_old_weight"]), horizon, threshold, limits, chunk.action_dim)

    def begin(self, plan: ArmPlan) -> None:
        """``plan``'s goal starts (under the goals' lock): what ended an earlier goal's trajectories is not its fault,
        and a hold after it brakes from its plan. A goal still preparing touches neither: another may be running."""
        self.arm.forget_fault()
        self._plan = plan

    def due(self, plan: ArmPlan, now: float, rate_hz: float) -> float:
        """The deadline (seconds from now) of a chunk asked for now, or 0 when none should be asked for yet: when the
        plan runs low, before its last target minus ``send_lead_s`` (at least one period); with no plan left (the
        arm at rest, or held) the chunk window, ``(actions_per_chunk - chunk_threshold)`` periods."""
        with plan.lock:
            remaining = plan.queue.remaining(now)
            end = plan.queue.time(plan.queue.last) if remaining else now
        if plan.awaiting or remaining > plan.threshold or now - plan.last_request < 1.0 / rate_hz:
            return 0.0
        period = plan.queue.period
        if not remaining:
            return max(plan.horizon - plan.threshold, 1) * period
        return max(end - now - self._settings["send_lead_s"], period)

    def max_input_age(self, plan: ArmPlan) -> float:
        """How old a chunk's inputs (the joint states it read, its frames) may be when it comes: as old as
        input_timeout_s when it was asked for, plus the longest deadline ``due`` gives a chunk and the answer's slack
        past it (a later chunk is answered within that); older, it acts on a scene that may have changed."""
        longest = max(plan.threshold, plan.horizon - plan.threshold, 1) * plan.queue.period
        return self._settings["input_timeout_s"] + longest + ANSWER_SLACK_S

    def frame_time(self, answer: Infer.Response, asked_at: float) -> float:
        """When the camera frames of ``answer`` were captured (node clock s); FAILED_PRECONDITION when it names
        none (every VLA reads a camera), an unstamped one, one older than ``input_timeout_s`` when the chunk was
        asked for, or one stamped ahead of this node's clock now (the inference node dates a frame no later than it
        arrived, ``stamps.capture_ns``: so only its clock, not the camera's, can be ahead)."""
        if not answer.observation_id:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, "no camera frame: the inference node has no "
                              "observation (is the camera, or observation_node, publishing?)")  # fmt: skip
        stamp = seconds(answer.observation_stamp)
        age, timeout = asked_at - stamp, self._settings["input_timeout_s"]
        if not stamp:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"camera frame {answer.observation_id} has no stamp: "
                              "its age cannot be checked")  # fmt: skip
        if age > timeout:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"camera frame {answer.observation_id} was {age:.2f} s "
                              f"old when the chunk was asked for, over input_timeout_s {timeout:g}")  # fmt: skip
        ahead = stamp - self.arm.readings.now()  # the frame may be newer than the request, never newer than now
        if ahead > MAX_CLOCK_SKEW_S:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"camera frame {answer.observation_id} is stamped "
                              f"{ahead:.1f} s ahead of this node's clock: the camera and this node run on different "
                              "clocks (use_sim_time?)")  # fmt: skip
        return stamp

    async def execute(self, run: GoalRun, plan: ArmPlan, answer: Infer.Response, observed_at: float, frame_at: float,
                      origin: np.ndarray, infer_s: float) -> tuple[ErrorCode, str] | None:  # fmt: skip
        """Merge ``answer``'s chunk (computed from the arm at ``origin``, its action joints in model units, read at
        ``observed_at``, and frames captured at ``frame_at``) into the plan and send it; the reason it was missed
        (the arm held where it was refused), or None once the controller took it or the goal ended (meanwhile, or
        here: an arm found not following its plan ends it, held where it is); then the arm holds."""
        if not run.running or plan.closed:  # ended (or being ended) while the chunk was computed: nothing more
            return None  # goes to the arm
        chunk = answer.actions
        if (chunk.action_dim, len(chunk.actions)) != (plan.action_dim, chunk.horizon * plan.action_dim) or \
                abs(chunk.period_s - plan.queue.period) > 1e-6:  # fmt: skip
            return ErrorCode.INVALID_ARGUMENT, f"a chunk of {chunk.horizon} x {chunk.action_dim} actions " \
                f"{chunk.period_s} s apart, unlike the goal's first ({plan.action_dim} wide, {plan.queue.period} s)"  # fmt: skip
        rows = np.asarray(chunk.actions, dtype=np.float64).reshape(chunk.horizon, chunk.action_dim)[: plan.horizon]
        queue, now, lead = plan.queue, self.arm.readings.now(), self._settings["send_lead_s"]
        age, bound = now - min(observed_at, frame_at), self.max_input_age(plan)
        if age > bound:  # the scene may have changed since (the first chunk's probe waits without a deadline)
            return ErrorCode.DEADLINE_EXCEEDED, f"the chunk's inputs were {age:.2f} s old when it came, over " \
                f"{bound:.2f} s (input_timeout_s, the longest deadline a chunk is asked with, the answer's slack)"  # fmt: skip
        with plan.lock:
            if plan.closed:  # a hold ending the goal came first (its result may not be out yet): nothing after it
                return None
            commanded, moving = queue.commanded(now), queue.velocity(now)
            targets = self.arm.map.to_joints(rows, origin)
            if commanded is not None:  # a turning joint's targets beside the plan's, not a turn away (a wrap)
                targets = beside(targets, commanded, turning(plan.limits))
            merge = queue.merge(targets, observed_at, now + lead)
            if not merge.blended + merge.appended:
                return ErrorCode.DEADLINE_EXCEEDED, f"the chunk arrived after all its {len(rows)} targets were due"
            times = np.array([queue.time(queue.first + i) for i in range(len(queue.rows))]) - now
            try:
                safe, start, start_velocity = self._checked(plan, commanded, moving, times)
                refusal = None
            except EngineError as exc:  # an arm not following its plan stops where it is, not where the plan is
                queue.hold(now)
                at = None if isinstance(exc, NotFollowing) else commanded
                self.arm.hold(at, self._node.get_logger().warning, velocity=moving)
                refusal = exc
            else:
                queue.told(safe.positions, safe.velocities, safe.times, now, start, start_velocity)  # as it will play
                plan.sending = True
        if isinstance(refusal, NotFollowing):  # blocked, or its controller dropped the plan: the goal ends, as the
            run.end(refusal.code, refusal.message)  # clock's own check ends it (no next chunk pushes on from there)
            return None
        if refusal is not None:  # this chunk cannot be played from where the arm is: a miss, the next may
            return refusal.code, refusal.message
        try:
            # a hold since plan.sending was set clears it (before the hold's stop goes, under ArmIO's sending lock)
            refused = await self.arm.send(now, safe, wanted=lambda: plan.sending)
        except BaseException as exc:  # the send broke off: nothing of it may play (taken later: stopped), the jaw
            self.hold(plan)  # included; the goal ends (its plan is held for good)
            run.end(ErrorCode.INTERNAL, f"the trajectory could not be sent: {type(exc).__name__}: {exc}")
            raise
        if not refused:
            with plan.lock:
                plan.sending = False  # taken: the jaw follows it now (refused: it waits for the hold below)
        if not run.running:  # the goal ended while the trajectory was on its way: it must not play
            # Taken with no hold since it was sent: stopped here. Refused, it plays on nowhere: taken late or by some
            # arms only, ArmIO stopped it; after a hold (the ending's, or a newer goal's preemption) what was sent
            # after it replaced it, and holding again would replace a newer goal's trajectory with a stop.
            if not refused:
                self.hold(plan)
            return None
        if refused:
            if plan.sending:  # (cleared: a hold came while it was made ready, ``wanted``: the holder's, not again)
                self.hold(plan, closing=False)  # a miss: the goal goes on
            return ErrorCode.ABORTED, refused
        sent_at, oldest = self.arm.readings.now(), min(observed_at, frame_at)
        plan.latency.add(sent_at - oldest)
        trace = ChunkTrace(task_id=run.task_id, chunk_id=plan.sent, request_id=answer.request_id,
                           observed_at=time_of(observed_at),
                           observation_id=answer.observation_id, frame_stamp=answer.observation_stamp,
                           infer_ms=infer_s * 1e3, latency_ms=(sent_at - oldest) * 1e3, dropped=merge.dropped,
                           blended=merge.blended, appended=merge.appended, waited=merge.waited, clamped=safe.clamped,
                           underruns=queue.underruns, taken_spread_ms=self.arm.taken_spread_s * 1e3)  # fmt: skip
        trace.header.stamp = time_of(sent_at)
        self._traces.publish(trace)
        plan.sent += 1
        return None

    def _checked(self, plan: ArmPlan, commanded: np.ndarray | None, moving: np.ndarray | None,
                 times: np.ndarray) -> tuple[SafeTargets, np.ndarray, np.ndarray | None]:  # fmt: skip
        """The plan's targets made safe, from where the plan has the arm now, moving as the plan moves it (from the
        measured position at rest without a plan), and where the new plan starts, at what velocity (the old plan's;
        without one, the measured state); OUT_OF_RANGE when the arm does not follow its
        plan, or when its first segment would be too fast from where the controller starts it: a
        joint_trajectory_controller takes a new trajectory from its measured state, moving (a joint whose driver
        reports no velocity: from rest), or with controller_starts_from commanded (its
        interpolate_from_desired_state or open_loop_control) from its own command, the plan's (without a plan, both
        from the command the controller says it holds and from the measured state)."""
        measured, read_at = self.arm.readings.reading(self.arm.names)
        margin = self.arm.tolerances["limit_margin"]
        if commanded is None:  # no plan now (the first chunk, after an underrun or a hold): still moving, maybe
            jump = self.arm.tolerances["max_start_jump"].copy()
            jump[self.arm.gripper_columns] = np.inf  # a jaw's own controller: it may jump to a new grip
            plan.queue.rows = beside(plan.queue.rows, measured, turning(plan.limits))  # a wrist read wrapped
            safe = check_targets(plan.queue.rows, times, measured, self.arm.names, plan.limits, margin, jump)
        else:
            # where the plan had the arm when it was read: back along the plan's motion (the queue has merged since)
            self._check_tracking(measured, commanded - moving * (self.arm.readings.now() - read_at), plan.limits)
            safe = check_targets(plan.queue.rows, times, commanded, self.arm.names, plan.limits, margin, np.inf,
                                 moving)  # fmt: skip
        rest = self.arm.readings.from_rest(self.arm.names)  # (none with controller_starts_from commanded)
        if self.arm.readings.starts_from_command and commanded is not None:
            start, velocity = commanded, moving  # it plays on from its own command: the plan's
        else:  # from the measured state: from rest where the driver reports no velocity (a JTC without that state)
            start, velocity = self.arm.readings.start_state(self.arm.names)
            start = beside(start[None, :], safe.positions[0], turning(plan.limits))[0]  # a wrapped reading
            velocity = np.where(rest, 0.0, velocity)
        origins = [(start, velocity)]
        # no plan, and a controller that starts from its own command (interpolate_from_desired_state: where our stop,
        # another client or its own hold left it; ``ArmIO.command_now``): checked from that too (the queue is told
        # the measured start: the arm is tracked from where it is)
        command = self.arm.command_now(start, velocity) if commanded is None else None
        if command is not None:
            origins.append((beside(command[0][None, :], safe.positions[0], turning(plan.limits))[0], command[1]))
        try:
            for origin, speed in origins:
                check_moving_start(safe, float(safe.times[0]), origin, speed, self.arm.names, plan.limits)
        except EngineError as exc:  # a joint of a position-only driver: say why, and what would start it moving
            still = [name for name, from_rest in zip(self.arm.names, rest, strict=True) if from_rest]
            if commanded is None or not any(exc.message.startswith(f"joint {name}:") for name in still):
                raise  # (with no plan the arm is braking or at rest: the controller's own command would not help)
            raise EngineError(exc.code, f"{exc.message} (the controller starts each trajectory of it from rest: set "
                              "its interpolate_from_desired_state (Humble: open_loop_control) and "
                              "controller_starts_from: commanded)") from exc
        return (safe, start, velocity) if commanded is None else (safe, commanded, moving)

    def _check_tracking(self, measured: np.ndarray, commanded: np.ndarray, limits: list[JointLimit]) -> None:
        """NotFollowing when a joint (the gripper aside: it may stall on what it holds) is over max_tracking_error
        from where the plan has it (a turning joint the short way round)."""
        error = np.abs(difference(measured, commanded, turning(limits)))
        error[self.arm.gripper_columns] = 0.0
        bound = self.arm.tolerances["max_tracking_error"]
        if (error > bound).any():
            joint = int(np.argmax(error - bound))
            raise NotFollowing(ErrorCode.OUT_OF_RANGE, f"joint {self.arm.names[joint]} is {error[joint]:.3f} from "
                               f"where its plan has it, over its max_tracking_error {bound[joint]:g}: the arm is not "
                               "following")  # fmt: skip

    def miss(self, run: GoalRun, plan: ArmPlan, code: ErrorCode, message: str, late: bool = False) -> None:
        """Count a missed chunk; end the goal (the arm held) after ``max_missed_chunks`` in a row. A chunk missed
        after the goal ended (its request was still on its way) is not the goal's: not counted. ``late``: the chunk
        asked for is past due, counted once whether the clock or its late answer sees it first."""
        with plan.lock:  # the clock thread (a chunk past due) and the executor (a late or refused one) both count
            if not run.running or plan.closed or (late and plan.overdue):  # (closed: its ending says why)
                return
            plan.overdue |= late
            plan.missed += 1
            plan.last_miss = (code, message)
            plan.missed_total += 1
            in_a_row = plan.missed
        self._node.get_logger().warning(f"{run.task_id}: {MISSED} ({in_a_row} in a row): {message}")
        if in_a_row >= self._settings["max_missed_chunks"]:
            self.hold(plan)
            run.end(code, f"{in_a_row} chunks in a row missed (max_missed_chunks), the arm holds: {message}")

    def tick(self, run: GoalRun, plan: ArmPlan) -> None:
        """Every period: end the goal, holding the arm (from where it is measured; with no stop to a controller
        another client took the arm from: ``Fault``), on a controller fault, gripper goals refused in a row or a jaw
        that cannot move (``_jammed``), a controller slowed below the plan's speed (``ArmIO.slowed``) or stale joint
        states; count underruns and a chunk past due that has not come (a hung server is a miss, not a wait); hand
        each gripper on its own controller its planned position ``send_lead_s`` ahead (its last one, settled, once
        the plan ends sooner), once the arm's controllers have taken the plan (a jaw must not close on rows an arm's
        controller then refuses)."""
        faults = self.arm.take_faults()
        if faults:  # a controller stopped playing the plan: the arm is not where the plan has it (blocked, taken)
            self.hold(plan, where_it_is=True)  # (a controller another client took is sent nothing)
            run.end(ErrorCode.ABORTED, "; ".join(fault.why for fault in faults))
            return
        for gripper in self.arm.grippers:
            if gripper.refused >= self._settings["max_missed_chunks"]:  # it refuses every one: it would never grip
                self.hold(plan)
                run.end(ErrorCode.ABORTED, f"{gripper.target} refused {gripper.refused} gripper goals in a row "
                        "(max_missed_chunks), the arm holds: the jaw cannot follow the plan")  # fmt: skip
                return
        jammed = self._jammed(plan)
        if jammed:  # the model's grasp cannot happen: the arm is not left to play on without its jaw
            self.hold(plan)
            run.end(ErrorCode.ABORTED, jammed)
            return
        slowed = self.arm.slowed()
        if slowed:  # behind its plan, or paused (a UR plays a stop at 0% on resume): braked from where it is
            self.hold(plan, where_it_is=True)
            run.end(ErrorCode.FAILED_PRECONDITION, slowed)
            return
        try:
            measured, read_at = self.arm.readings.reading(self.arm.names)
        except EngineError as exc:
            self.hold(plan)
            run.end(exc.code, exc.message)
            return
        now, holds = self.arm.readings.now(), [gripper.holds for gripper in self.arm.grippers]
        with plan.lock:
            plan.queue.check_underrun(now)
            ahead, settled = None, False
            if not plan.sending and plan.queue.rows is not None:  # the plan's last target once it is that near
                when = now + self._settings["send_lead_s"]
                settled = when >= plan.queue.end
                ahead = plan.queue.commanded(min(when, plan.queue.end))
            here = plan.queue.commanded(read_at)  # where the plan had the arm when it was read (not now: it moved on)
            resting = plan.queue.resting(read_at)  # or, run out, where it holds the arm (pushed off it: not following)
        for gripper, jaw in zip(self.arm.grippers, self.arm.gripper_columns, strict=True):
            gripper.observe(float(measured[jaw]), now, self._jaw_floor(plan, jaw))
            if gripper.unanswered_s():  # its controller silent: what its manager says of it (``unmoved``)
                gripper.ask_while_silent(self._settings["answer_wait_s"])
        try:  # a controller that dropped or stalled the trajectory is found within a period, not at the next chunk
            if here is not None and run.running:
                self._check_tracking(measured, here, plan.limits)
                plan.excursion.add(measured, here, turning(plan.limits))
            elif resting is not None and run.running:
                self._check_tracking(measured, resting, plan.limits)
        except NotFollowing as exc:
            self.hold(plan, where_it_is=True)
            run.end(exc.code, exc.message)
            return
        if ahead is not None and run.running:
            for gripper, jaw, held in zip(self.arm.grippers, self.arm.gripper_columns, holds, strict=True):
                gripper.command(float(ahead[jaw]), held, settled=settled)
        if plan.awaiting and now > plan.due_at + plan.queue.period:
            self.miss(run, plan, ErrorCode.DEADLINE_EXCEEDED, "no chunk by its deadline", late=True)

    def unmoved(self, plan: ArmPlan) -> str:
        """Why the goal's motion did not happen ('' = it did, as far as the readings tell): no joint its plan moved
        clearly went with it (``Excursion``), within the tracking error the whole time; or a gripper on its own
        controller that the plan took over JAW_MOVED of its range never moved that far while a goal of ours stood
        past the controller's stall_timeout without a word (``GripperIO.unanswered_s``: a controller switched off;
        a working one says reached, or stalled on what the jaw holds; its controller manager, asked while it was
        silent, says which: not active, named with the remedy; active, the jaw held there, by its motors off or by
        what it grips with a stall check that never fires). A plan sent that no period of the goal found under way
        (the first trajectory went out as the goal's duration ended) did not move the arm either."""
        if plan.sent and plan.excursion.start is None:
            return ("the arm was never seen playing its plan: no period of the goal found a trajectory of it under way "
                    "(the first went out as duration_s ended)")  # fmt: skip
        for controller in self.arm.controllers:  # each arm on its own: one arm moving says nothing of the other
            others = [i for i in range(len(self.arm.names)) if i not in controller.columns]
            joint = plan.excursion.unfollowed(self.arm.tolerances["max_tracking_error"], others)
            if joint is not None:
                planned, measured = plan.excursion.planned[joint], plan.excursion.measured[joint]
                return (f"the arm did not move as planned: joint {self.arm.names[joint]} was planned {planned:.3f} "
                        f"from where the goal started and went {measured:.3f}, and no other joint of its controller "
                        f"followed its plan either (is it active and playing {controller.target}?)")  # fmt: skip
        for jaw, gripper in zip(self.arm.gripper_columns, self.arm.grippers, strict=True):
            stood = gripper.unanswered_s()
            if not stood or not plan.excursion.still(jaw, self._jaw_floor(plan, jaw)):
                continue
            reach, went = plan.excursion.reach[jaw], plan.excursion.measured[jaw]
            silent = (f"its plan took {self.arm.names[jaw]} {reach:.3f} from where it was, it went {went:.3f}, and "
                      f"{gripper.target} kept a goal {stood:.1f} s without saying it reached its position or stalled")
            listed = gripper.listed()
            if listed is not None and listed[1] == ACTIVE:  # on, and the jaw not moving: held, by what or why
                return (f"the gripper did not move: {silent}, though {listed[2]} lists {listed[0]} active: the jaw is "
                        "held where it is (its motors off, or by what it grips with the controller's stall check "
                        "never firing: a velocity reading noisier than its stall_velocity_threshold)")  # fmt: skip
            if listed is not None:
                return f"the gripper did not move: {silent}; {inactive_reason(*listed, GRIPPER_INACTIVE)}"
            return f"the gripper did not move: {silent} (is its controller active?)"
        return ""

    @staticmethod
    def _jaw_floor(plan: ArmPlan, jaw: int) -> float:
        """JAW_MOVED of the jaw's position range: less is no motion of the jaw."""
        limit = plan.limits[jaw]
        return JAW_MOVED * (limit.upper - limit.lower)

    def _jammed(self, plan: ArmPlan) -> str:
        """Why a jaw cannot move ('' = as far as its controller said and its readings tell, each can): a gripper on
        its own controller whose newest goals of ours below and above the jaw both stalled over JAW_MOVED of its
        range short, the jaw stopped at the same place (within that) both times (``GripperIO.jammed``), or whose jaw
        stayed within that of one place while our goals asked it away above and below, each for longer than the
        controller's stall timeout and a margin (``GripperIO.stuck``: goals replaced faster than it are never said
        stalled): what a jaw holds stops it one way only, so its motors are off, its controller switched off (or it
        is wedged, or too weak to move)."""
        for jaw, gripper in zip(self.arm.gripper_columns, self.arm.grippers, strict=True):
            name = self.arm.names[jaw]
            jammed = gripper.jammed(self._jaw_floor(plan, jaw))
            if jammed is not None:
                where, below, above = jammed
                return (f"the gripper cannot move: {gripper.target} stalled {name} at {where:.3f}, {above:.3f} short "
                        f"of a goal above and {below:.3f} short of one below (what a jaw holds stops it one way only: "
                        "are its motors on, is gripper_max_effort enough?), the arm holds")  # fmt: skip
            stuck = gripper.stuck()
            if stuck is not None:
                where, above_s, below_s = stuck
                return (f"the gripper cannot move: {name} stayed at {where:.3f} while goals to {gripper.target} "
                        f"asked it away above for {above_s:.1f} s and below for {below_s:.1f} s (what a jaw holds "
                        "stops it one way only: is its controller active, are its motors on?), the arm holds")
        return ""

    def hold(self, plan: ArmPlan | None, where_it_is: bool = False, closing: bool = True) -> None:
        """The arm stops, decelerating from where its plan has it now, as fast as the plan moves it (``where_it_is``:
        from where it is measured, for an arm not following its plan; so too while the plan is on its way to the
        controller, which may refuse it: it moves the arm only once taken); the plan is forgotten and, ``closing``
        (the goal ends: every caller but a missed chunk's), takes no chunk after this. Without ``plan``, the last
        goal's (a goal that ended: its arm may still move). A controller another client took over is sent nothing
        (``ArmIO.hold``)."""
        plan = plan or self._plan
        at = velocity = None
        if plan is not None:
            with plan.lock:
                now = self.arm.readings.now()
                if not where_it_is and not plan.sending:
                    at, velocity = plan.queue.commanded(now), plan.queue.velocity(now)
                plan.queue.hold(now)
                plan.sending = False
                plan.closed |= closing
        self.arm.hold(at, self._node.get_logger().warning, velocity=velocity)
