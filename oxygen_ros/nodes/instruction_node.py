"""`instruction_node`: the FollowInstruction action on `/follow_instruction`, a language instruction made motion.

Each goal first asks `/oxygen/infer` for actions, with the arm's joint state when one is configured. A VLA model
(pi0, pi0.5) answers with a chunk, and the goal runs on the model's action head: its chunks drive the ros2_control
arm through its FollowJointTrajectory controllers (``nodes/vla_arm.py``: chunk execution, blending, limits, honest
outcomes; ``nodes/arm_io.py``: joint states, the URDF's limits, a controller per arm, a gripper per jaw). Every
chunk also goes out on `arm/action_chunk` (ActionChunk, the model's units) and as feedback, each trajectory sent on
`arm/chunk_trace`.

A text-only model (SmolLM2) has no action head (FAILED_PRECONDITION from the probe): then the language head reads the
instruction with the scene text and narrates which object to take, every `narration_period_s`, and a low-level
controller here (``oxygen_ros.control.reach``) turns the target into end-effector waypoint chunks on
`arm/action_chunk` at exactly ``rate_hz``. The target is the detected object (newest frame, looked up every
PERCEPTION_PERIOD_S) that the instruction names by colour or shape; the language head's answer (schema-checked JSON,
``nodes/narration.py``) is narration and may stop the arm, never start it. With no target, or while the head says
stop, the arm holds still, and a goal whose arm never moved towards its target ends FAILED_PRECONDITION, not
SUCCEEDED.

Ticks come from the goal's clock thread (see ``_keep_time``), never waiting on the model: ``rate_hz`` chunks per
second on the controller path; on the VLA path one tick per control period (the chunk's period_s), with at most
``rate_hz`` chunk requests a second. Decisions, stamps, the ticks and ``duration_s`` follow the node clock
(use_sim_time honoured: a paused simulator pauses the goal; its clock going back ends it with the arm held).

A bad goal (empty instruction, rate_hz < 0.01 or > max_rate_hz, duration_s < 0, NaN or over a day) is accepted and
aborted with INVALID_ARGUMENT, an instruction over ``bounds.TEXT_CHARS`` with OUT_OF_RANGE; UNAVAILABLE when
`/oxygen/infer` is absent. A newer goal preempts the running one (CANCELLED, "preempted"); when no goal runs the arm
is told to hold. A stream keeps counts, not a list per chunk, so one that runs until cancelled holds the same memory
after a day as after a second.
"""

import math
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from oxygen_ros.nodes.executor import Executor
from rclpy.timer import Timer

from oxygen_ros.action import FollowInstruction
from oxygen_ros.control import reach
from oxygen_ros.errors import NO_ACTION_HEAD, EngineError, ErrorCode
from oxygen_ros.msg import ActionChunk
from oxygen_ros import bounds
from oxygen_ros.nodes import arm_io, gripper_io, latest_frame, narration, vla_arm
from oxygen_ros.nodes.arm_io import ArmIO
from oxygen_ros.nodes.convert import action_chunk
from oxygen_ros.nodes.declare import Ranges, Table, keep_positive
from oxygen_ros.nodes.goal_run import GoalRun
from oxygen_ros.nodes.spin import STOP_WAIT_S, run
from oxygen_ros.nodes.tick_clock import TickClock
from oxygen_ros.nodes.task_action import TaskActionNode
from oxygen_ros.nodes.vla_arm import ArmPlan, VlaArm
from oxygen_ros.srv import Infer

NODE_NAME = "instruction_node"
BASE_FRAME = "base_link"
PERCEPTION_PERIOD_S = 0.2  # how often the target is looked up in the newest frame
PARAMETERS: Table = {
    "max_rate_hz": (50.0, "highest rate_hz a goal may ask for; above it the goal is aborted INVALID_ARGUMENT"),
    "horizon": (10, "waypoints per action chunk of the controller"),
    "narration_period_s": (3.0, "how often the language head is asked to narrate, seconds"),
    "max_new_tokens": (24, "narration token budget"),
    "head_may_stop": (False, "the language head's stop flag holds the controller's arm (a model that can judge it: "
                      "SmolLM2-135M answers stop to every instruction)"),
    "infer_timeout_s": (60.0, "longest wait for /oxygen/infer to answer, seconds"),
    "service_wait_s": (1.0, "how long to wait for /oxygen/infer to appear before aborting UNAVAILABLE, seconds"),
    **latest_frame.PARAMETERS,
    **arm_io.PARAMETERS,
    **gripper_io.PARAMETERS,
    **vla_arm.PARAMETERS,
}
POSITIVE = ["max_rate_hz", "horizon", "narration_period_s", "max_new_tokens", "infer_timeout_s", "service_wait_s",
            *arm_io.POSITIVE, *vla_arm.POSITIVE]  # fmt: skip
RANGES: Ranges = {
    "max_rate_hz": (0.0, 1000.0),
    "horizon": (1, 1000),
    "narration_period_s": (0.0, 3600.0),
    "max_new_tokens": (1, 4096),
    "infer_timeout_s": (0.0, 3600.0),
    "service_wait_s": (0.0, 600.0),
    **arm_io.RANGES,
    **gripper_io.RANGES,
    **vla_arm.RANGES,
}


@dataclass
class Stream:
    """A running goal's state, touched by its chunk tick (one at a time) and its narration coroutine."""

    run: GoalRun
    instruction: str
    rate_hz: float
    duration_s: float
    vla: bool
    plan: ArmPlan | None = None  # VLA path: the arm's plan
    first_chunk: tuple | None = None  # VLA: the probe (answer, observed_at, frame_at, origin, infer_s), sent at start
    ticks: TickClock | None = None  # the clock the goal's ticks keep (set when it starts)
    started: float = 0.0  # when streaming began on that clock (duration_s counts from it)
    arm: reach.Arm = field(default_factory=reach.Arm)
    narration: str = ""
    chunks_sent: int = 0
    first_chunk_at: float = 0.0  # when the first and the latest chunk went out (monotonic seconds)
    last_chunk_at: float = 0.0
    target: tuple[float, float] | None = None  # where the named object is (base_link, metres); None = not seen
    target_seen: bool = False  # controller path: the arm was sent towards the target at least once
    head_stop: bool = False  # controller path: the language head's latest answer says the arm must not move
    clock: threading.Thread | None = None  # runs the ticks


class InstructionNode(TaskActionNode[Stream]):
    """Raises ValueError naming a bad parameter."""

    def __init__(self, **kwargs: Any) -> None:
        # all read once (settings): read-only, so a later set is refused, not ignored
        super().__init__(
            NODE_NAME, FollowInstruction, "follow_instruction", PARAMETERS, POSITIVE, RANGES, list(PARAMETERS),
            **kwargs,
        )
        keep_positive(self, *POSITIVE)
        try:
            self.arm = ArmIO(self, self.settings, arm_io.declare_lists(self), self.group)
        except ValueError:
            self.destroy_node()
            raise
        self.vla = VlaArm(self, self.arm, self.settings)
        self._chunks = self.create_publisher(ActionChunk, "arm/action_chunk", 10)

    def release(self) -> None:
        if hasattr(self, "arm"):  # a node refused at its parameters has none
            self.arm.destroy()

    def check(self, goal: FollowInstruction.Goal) -> None:
        bounds.text("instruction", goal.instruction, bounds.TEXT_CHARS)
        if not goal.instruction.strip():
            raise EngineError(ErrorCode.INVALID_ARGUMENT, "the instruction is empty")
        bounds.within("rate_hz", goal.rate_hz, bounds.MIN_RATE_HZ, self.settings["max_rate_hz"], note=" Hz")
        bounds.within("duration_s", goal.duration_s, 0.0, bounds.GOAL_DURATION_S, note=" s (0 = until cancelled)")

    async def prepare(self, run: GoalRun, goal: FollowInstruction.Goal) -> Stream | None:
        """Ask for actions once: the answer decides between the model's action head and the controller. The probe
        has no deadline (the first chunk may take its time; steps already due are dropped from it)."""
        state, origin, read_at = self._snapshot_or_none()
        if self.arm.configured:  # the controller's parameters are read while the model answers (``_arm_plan``)
            self.arm.check_ahead()
        asked_at, asked = self.arm.readings.now(), time.monotonic()
        probe = await self.infer.call(self._actions_request(run.task_id, goal.instruction, 0.0, state))
        infer_s = time.monotonic() - asked  # the model's time alone: the controller's check below is not inference
        vla = probe.success
        no_head = probe.error_code == ErrorCode.FAILED_PRECONDITION.value and NO_ACTION_HEAD in probe.message
        if not (vla or no_head):  # e.g. UNAVAILABLE, or FAILED_PRECONDITION: the inference node is not active
            if state is None and self.arm.configured and probe.error_code == ErrorCode.INVALID_ARGUMENT.value:
                run.end(ErrorCode.FAILED_PRECONDITION, f"{probe.message}; {self._why_no_state()}")
            else:
                run.end(probe.error_code, probe.message)
            return None
        stream = Stream(run, goal.instruction, goal.rate_hz, goal.duration_s, vla)
        if vla:
            stream.plan = await self._arm_plan(run, probe.actions)
            if stream.plan is None:
                return None
            if origin is None:
                run.end(ErrorCode.FAILED_PRECONDITION, self._why_no_state())
                return None
            try:  # (nothing of this goal moved the arm: a goal running meanwhile is not held for it)
                frame_at = self.vla.frame_time(probe, asked_at)
            except EngineError as exc:
                run.end(exc.code, exc.message)
                return None
            # sent from start(): once this goal is the node's current one, whose end always holds the arm
            stream.first_chunk = (probe, read_at, frame_at, origin, infer_s)
        mode = "the model's action head" if vla else "the controller (the model has no action head)"
        self.get_logger().info(f"{run.task_id}: {goal.instruction!r} at {goal.rate_hz:g} Hz from {mode}")
        return stream

    async def _arm_plan(self, run: GoalRun, chunk: ActionChunk) -> ArmPlan | None:
        """The goal's plan on the arm, or None after ending ``run`` saying why the arm cannot take these chunks."""
        try:
            plan = self.vla.plan_for(chunk)
        except EngineError as exc:
            run.end(exc.code, exc.message)
            return None
        missing = await self.arm.missing(self.settings["service_wait_s"])
        if missing:
            run.end(ErrorCode.FAILED_PRECONDITION, f"no arm controller: {missing} is not there")
            return None
        wrong = await self.arm.misconfigured(plan.limits)
        if wrong:
            run.end(ErrorCode.FAILED_PRECONDITION, wrong)
            return None
        return plan

    def _frame_time(self, stream: Stream, answer: Infer.Response, asked_at: float) -> float | None:
        """``VlaArm.frame_time``, or None after ending the goal (the arm held) with why the frames cannot be used."""
        try:
            return self.vla.frame_time(answer, asked_at)
        except EngineError as exc:
            self.vla.hold(stream.plan)
            stream.run.end(exc.code, exc.message)
            return None

    def _snapshot_or_none(self) -> tuple[np.ndarray | None, np.ndarray | None, float]:
        """``JointReadings.snapshot``, or Nones and now (no arm configured, or no fresh joint states)."""
        if self.arm.configured:
            try:
                return self.arm.readings.snapshot()
            except EngineError:
                pass
        return None, None, self.arm.readings.now()

    def _why_no_state(self) -> str:
        try:
            self.arm.readings.snapshot()
        except EngineError as exc:
            return exc.message
        return "the joint states arrived after the request"

    def start(self, stream: Stream) -> list[Timer]:
        self._perceive(stream)
        stream.ticks = TickClock(self.get_clock())
        stream.started = stream.ticks.now()
        if stream.vla:  # the probe's chunk is on its way to the arm: marked before the first tick could ask again
            self.vla.begin(stream.plan)
            stream.plan.awaiting, stream.plan.due_at = True, math.inf
            for gripper in self.arm.grippers:  # this goal's gripper answers from here on (a goal preparing has none)
                gripper.begin()
        stream.clock = threading.Thread(
            target=self._keep_time, args=(stream,), name=f"{stream.run.task_id} clock", daemon=True
        )
        stream.clock.start()
        if stream.vla:
            self.executor.create_task(self._first_chunk, stream)
            return []
        self.executor.create_task(self._narrate, stream)
        period = self.settings["narration_period_s"]
        return [
            self.create_timer(PERCEPTION_PERIOD_S, partial(self._perceive, stream), callback_group=self.group),
            self.create_timer(period, partial(self._narrate, stream), callback_group=self.group),
        ]

    def finish(self, stream: Stream, result: FollowInstruction.Result) -> None:
        stream.clock.join()  # it stops as soon as the goal ends
        plan = stream.plan
        n = plan.sent if plan else stream.chunks_sent
        span = stream.last_chunk_at - stream.first_chunk_at
        result.chunks_sent = n
        result.achieved_rate_hz = (n - 1) / span if n > 1 and span > 0 else 0.0
        if plan is not None:
            result.chunks_asked, result.chunks_missed = plan.asked, plan.missed_total
            result.underruns = plan.queue.underruns
            result.latency_p50_ms, result.latency_p99_ms = plan.latency.percentile(50), plan.latency.percentile(99)

    async def settle(self, stream: Stream) -> str:
        """The arm's stop answered before the goal's result (and so before a shutdown destroys the node; within
        ``answer_wait_s`` for a trajectory still on its way and as long for the stop, each at most a quarter of the
        shutdown's wait): refused or unanswered, ours are cancelled while the node can still send, and the result
        says so."""
        if stream.plan is None:
            return ""
        return await self.arm.stop_answered(min(self.settings["answer_wait_s"], STOP_WAIT_S / 4))

    def stopped(self) -> None:
        """No goal runs: the arm comes to rest, braking from where the last goal's plan has it (``VlaArm.hold``)."""
        if self.arm.configured:
            self.vla.hold(None)

    def _actions_request(self, task_id: str, instruction: str, deadline_s: float,
                         state: np.ndarray | None) -> Infer.Request:  # fmt: skip
        return Infer.Request(
            task_id=task_id,
            task_type="instruction",
            prompt=instruction,
            want_actions=True,
            max_new_tokens=1,  # the engine wants a text budget even when no text is asked for
            deadline_s=deadline_s,
            state=[] if state is None else state.astype(np.float32).tolist(),
        )

    def _keep_time(self, stream: Stream) -> None:
        """Tick until the goal ends: ``rate_hz`` on the controller path, each control period on the VLA path. Its own
        thread on the goal's clock (``nodes/tick_clock.py``: monotonic, or the node's ROS time under
        use_sim_time), not an executor timer: the executor's dispatch waits behind every other callback of the
        process (camera rendering, the model's Python) and rcl drops a timer's late periods, which cost ~5% of a
        10 Hz stream here. A tick that comes late is still run at once (the next one keeps the schedule); after a
        stall of over a period the lost periods are lost, not run in a burst. ROS time going back ends the goal
        FAILED_PRECONDITION with the arm held."""
        period = stream.plan.queue.period if stream.plan else 1.0 / stream.rate_hz
        ticks = stream.ticks
        assert ticks is not None, "start() sets the goal's clock before its thread"
        due = ticks.now()
        if ticks.simulated and due == 0:  # use_sim_time before the first /clock: no time to keep yet
            if stream.plan is not None:
                self.vla.hold(stream.plan)
            stream.run.end(ErrorCode.FAILED_PRECONDITION, "use_sim_time is set but no /clock has arrived yet")
            return
        while True:
            now = ticks.now()
            if due < now - period:
                due = now
            if ticks.wait_until(due, stream.run.stop):  # the goal ended: stop at once
                return
            try:
                if ticks.went_back:
                    raise EngineError(ErrorCode.FAILED_PRECONDITION, "the node's clock went back (a simulator reset "
                                      "or a looped bag): the goal's plan was timed in the old time")  # fmt: skip
                self._tick(stream)
            except Exception as exc:  # without its clock the goal could never end: end it, saying why
                try:
                    if stream.plan is not None:
                        self.vla.hold(stream.plan)
                finally:  # even when the hold itself fails (a shutdown): the goal must not stay open unwatched
                    if isinstance(exc, EngineError):
                        stream.run.end(exc.code, exc.message)
                    else:
                        stream.run.end(ErrorCode.INTERNAL, f"the chunk clock failed: {type(exc).__name__}: {exc}")
                return
            due += period

    def _tick(self, stream: Stream) -> None:
        """One period: end the goal when due, else the next controller chunk, or (VLA) watch the arm and ask for the
        next chunk when the plan runs low."""
        if stream.run.end_if_cancelled():
            return
        tick_s = stream.plan.queue.period if stream.plan else 1.0 / stream.rate_hz
        if stream.duration_s and stream.ticks.now() - stream.started >= stream.duration_s - 0.5 * tick_s:
            self._end_on_time(stream)
            return
        plan = stream.plan
        if plan is not None:
            self.vla.tick(stream.run, plan)
            now = self.arm.readings.now()
            deadline = self.vla.due(plan, now, stream.rate_hz) if stream.run.running else 0.0
            if deadline:
                self.executor.create_task(self._ask_actions, stream, deadline, plan.ask(now, deadline))
            return
        rows, stream.arm = reach.chunk(stream.arm, stream.target, self.settings["horizon"], 1.0 / stream.rate_hz)
        self._publish(
            stream, action_chunk(rows, stream.run.task_id, 1.0 / stream.rate_hz, self.get_clock().now().to_msg())
        )

    def _end_on_time(self, stream: Stream) -> None:
        """The goal's duration is over: success only if something moved, the controller did not fail it and the
        latest chunk reached the arm in time."""
        plan = stream.plan
        if plan is not None:
            self.vla.tick(stream.run, plan)  # the last period watched too: a fault, stale joint states, tracking
            if not stream.run.running:
                return
        if plan is not None and not plan.sent:
            stream.run.end(ErrorCode.DEADLINE_EXCEEDED, "no chunk reached the arm in duration_s: the arm did not move")
        elif plan is not None and plan.missed:  # the arm held or ran short at the end
            code, why = plan.last_miss
            stream.run.end(code, f"the goal's last {plan.missed} chunk(s) missed: {why}")
        elif plan is not None and plan.awaiting and self.arm.readings.now() > plan.due_at:
            stream.run.end(ErrorCode.DEADLINE_EXCEEDED, "the latest chunk was not there by its deadline: the arm ran "
                           "short")  # fmt: skip
        elif plan is not None and (unmoved := self.vla.unmoved(plan)):
            stream.run.end(ErrorCode.ABORTED, unmoved)
        elif stream.plan is None and not stream.target_seen:
            stream.run.end(ErrorCode.FAILED_PRECONDITION, "the model has no action head and nothing the instruction "
                           "names was in view (or the language head said stop): the arm did not move")  # fmt: skip
        else:
            stream.run.end()

    def _perceive(self, stream: Stream) -> None:
        """Find the named object in the newest frame (off the tick: detection takes milliseconds)."""
        detections = self.frame.detections()
        objects = detections.objects if detections else []
        found = reach.find_target([stream.instruction], objects)  # the instruction alone: model output never starts
        stream.target = (found.ahead_cm / 100.0, found.left_cm / 100.0) if found and not stream.head_stop else None
        stream.target_seen |= stream.target is not None

    def _publish(self, stream: Stream, chunk: ActionChunk) -> None:
        """A chunk on arm/action_chunk and as feedback."""
        if not stream.run.running:
            return
        stream.last_chunk_at = time.monotonic()
        if not stream.chunks_sent:
            stream.first_chunk_at = stream.last_chunk_at
        stream.chunks_sent += 1
        chunk.header.frame_id = BASE_FRAME
        self._chunks.publish(chunk)
        feedback = FollowInstruction.Feedback(chunk=chunk, narration=stream.narration)
        stream.run.goal_handle.publish_feedback(feedback)

    async def _ask_actions(self, stream: Stream, deadline_s: float, number: int) -> None:
        plan, run = stream.plan, stream.run
        try:
            state, origin, observed_at = self.arm.readings.snapshot()
        except EngineError as exc:
            plan.answered(number)
            self.vla.hold(plan)
            run.end(exc.code, exc.message)
            return
        asked_at, asked = self.arm.readings.now(), time.monotonic()
        try:
            out = await self.infer.call(self._actions_request(run.task_id, stream.instruction, deadline_s, state))
            if not run.running:
                return
            if out.success:
                late_s = self.arm.readings.now() - asked_at - deadline_s
                frame_at = self._frame_time(stream, out, asked_at)
                if frame_at is not None:
                    await self._to_arm(stream, out, observed_at, frame_at, origin, time.monotonic() - asked, late_s)
            elif out.error_code == ErrorCode.DEADLINE_EXCEEDED.value:
                self.vla.miss(run, plan, ErrorCode.DEADLINE_EXCEEDED, f"the chunk missed its {deadline_s:.3f} s "
                              "deadline", late=True)  # fmt: skip
            else:
                self.vla.hold(plan)
                run.end(out.error_code, out.message)
        finally:
            plan.answered(number)

    async def _to_arm(self, stream: Stream, answer: Infer.Response, observed_at: float, frame_at: float,
                      origin: np.ndarray, infer_s: float, late_s: float = 0.0) -> None:  # fmt: skip
        """An answer's chunk to the arm (counted missed when it cannot go), then to arm/action_chunk and the feedback.
        A chunk later than its deadline still goes (its targets still ahead are the best plan there is) but counts as
        missed: the arm ran short meanwhile."""
        plan = stream.plan
        missed = await self.vla.execute(stream.run, plan, answer, observed_at, frame_at, origin, infer_s)
        if missed is not None:
            self.vla.miss(stream.run, plan, *missed)
            return
        if not stream.run.running or plan.closed:  # it ended (or is ending): the chunk was not played, nor is it
            return  # published as if it were
        if late_s > 0:
            self.vla.miss(stream.run, plan, ErrorCode.DEADLINE_EXCEEDED, f"the chunk came {late_s:.3f} s late",
                          late=True)  # fmt: skip
        else:
            with plan.lock:  # the clock thread counts misses under it
                if not plan.overdue:
                    plan.missed = 0
        self._publish(stream, answer.actions)

    async def _first_chunk(self, stream: Stream) -> None:
        try:
            await self._to_arm(stream, *stream.first_chunk)
        finally:
            stream.plan.answered(1)  # the probe is request 1

    async def _narrate(self, stream: Stream) -> None:
        """The language head says, as JSON fields, which object the robot should reach for and whether it must stop
        (``narration``); its answer is the narration, and its stop flag holds the controller's arm."""
        text = await self.language_head(stream.run, "instruction", narration.prompt(stream.instruction),
                                        narration.SCHEMA)  # fmt: skip
        if text is not None:
            answer = narration.read(text)
            stream.narration = answer.narration
            if answer.stop is not None:
                stream.head_stop = answer.stop and self.settings["head_may_stop"]


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros instruction_node`."""
    return run(InstructionNode, partial(Executor, num_threads=3), NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
