"""The VLA path of a FollowInstruction goal: the model's chunks executed on a ros2_control arm, as robots run them.

Each chunk is asked for with the arm's state (``state_joint_names`` in the model's units: the policy needs it) and
the newest frame; it covers the control steps from when that state was read. The arm executes ``actions_per_chunk``
of it; when ``chunk_threshold`` planned actions remain the next chunk is asked for, due within the time they take
(``remaining x period``: later, the arm would run dry), so inference overlaps execution (LeRobot's async inference).
An arriving chunk is merged into the plan (``control.arm.action_queue``: steps already due dropped, overlapping ones
blended with ``blend_old_weight``), mapped to joint units, checked against the limits and the measured state
(``control.arm.safety``) and sent as one trajectory starting one period ahead, stamped on the node clock.

Honest outcomes: a chunk that is late, arrives after all its steps, is refused by the limits or by the controller is
missed (the arm holds when it was refused); ``max_missed_chunks`` in a row end the goal (DEADLINE_EXCEEDED for late
chunks, else the refusal's code); stale joint states or a controller fault end it at once with the arm held; a goal
that never got a chunk to the arm does not succeed. The result counts chunks sent and missed, underruns, and the
p50 / p99 latency from reading the state to sending the trajectory.
"""

import threading
from dataclasses import dataclass, field

import numpy as np
from rclpy.node import Node

from oxygen_ros.control.arm.action_queue import ActionQueue
from oxygen_ros.control.arm.latency import Latency
from oxygen_ros.control.arm.safety import check_targets
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.msg import ActionChunk, ChunkTrace
from oxygen_ros.nodes.arm_io import ArmIO, stamp_of
from oxygen_ros.nodes.goal_run import GoalRun

PARAMETERS = {
    "actions_per_chunk": (0, "actions of each chunk the arm executes (LeRobot's actions_per_chunk / n_action_steps); "
                          "0 = the whole chunk"),  # fmt: skip
    "chunk_threshold": (0, "ask for the next chunk when this many planned actions remain; 0 = half of "
                        "actions_per_chunk"),  # fmt: skip
    "blend_old_weight": (0.3, "where two chunks overlap, old x this + new x (1 - this) (LeRobot's weighted_average); "
                         "0 = the newest chunk only"),  # fmt: skip
    "max_missed_chunks": (3, "chunks in a row late or refused before the goal ends (the arm holds)"),
}
RANGES = {"actions_per_chunk": (0, 10_000), "chunk_threshold": (0, 10_000), "blend_old_weight": (0.0, 0.99),
          "max_missed_chunks": (1, 1000)}  # fmt: skip


@dataclass
class ArmPlan:
    """One goal's execution state on the arm."""

    queue: ActionQueue
    horizon: int  # actions of a chunk the arm executes
    threshold: int  # planned actions left when the next chunk is asked for
    latency: Latency = field(default_factory=Latency)
    sent: int = 0
    missed: int = 0  # in a row
    missed_total: int = 0
    last_request: float = -1e18  # node clock, s
    awaiting: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)  # the queue: the clock thread reads what chunks change


def plan_for(settings: dict, chunk: ActionChunk) -> ArmPlan:
    """The plan's shape for this model's chunks."""
    horizon = min(settings["actions_per_chunk"] or chunk.horizon, chunk.horizon)
    threshold = min(settings["chunk_threshold"] or max(1, horizon // 2), horizon)
    return ArmPlan(ActionQueue(chunk.period_s, settings["blend_old_weight"]), horizon, threshold)


class VlaArm:
    """The node-side half: ``arm`` speaks to the controller; ``publish`` sends the chunk to arm/action_chunk and
    the goal's feedback."""

    def __init__(self, node: Node, arm: ArmIO, settings: dict) -> None:
        self._node, self.arm, self._settings = node, arm, settings
        self._traces = node.create_publisher(ChunkTrace, "arm/chunk_trace", 10)

    def check_ready(self, chunk: ActionChunk) -> None:
        """FAILED_PRECONDITION naming what keeps this model's chunks from the arm: no joints configured or not as many
        as the chunk has dimensions, a joint without limits, or stale joint states."""
        if not self.arm.configured:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, "the model sends joint actions but no arm is configured: "
                              "set action_joint_names (and trajectory_action) to the controller's joints")  # fmt: skip
        if len(self.arm.names) != chunk.action_dim:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"the model's {chunk.action_dim} action dimensions need "
                              f"as many action_joint_names, {len(self.arm.names)} are set")  # fmt: skip
        self.arm.limits()
        self.arm.measured(self.arm.names)

    def due(self, plan: ArmPlan, now: float, rate_hz: float) -> float:
        """The deadline of a chunk asked for now (seconds; the time the plan has left, at least one period), or 0
        when none should be asked for yet."""
        with plan.lock:
            remaining = plan.queue.remaining(now)
        if plan.awaiting or remaining > plan.threshold or now - plan.last_request < 1.0 / rate_hz:
            return 0.0
        return max(remaining, 1) * plan.queue.period

    async def execute(self, run: GoalRun, plan: ArmPlan, chunk: ActionChunk, observed_at: float, origin: np.ndarray,
                      infer_s: float) -> tuple[ErrorCode, str] | None:  # fmt: skip
        """Merge ``chunk`` (computed from the arm at ``origin``, its action joints in model units, read at
        ``observed_at``) into the plan and send it; the reason it was missed (the arm held where it was refused), or
        None once the controller took it."""
        rows = np.asarray(chunk.actions, dtype=np.float64).reshape(chunk.horizon, chunk.action_dim)[: plan.horizon]
        queue, now = plan.queue, self.arm.now()
        with plan.lock:
            from_rest = queue.rows is None or queue.remaining(now) == 0
            merge = queue.merge(self.arm.map.to_joints(rows, origin), observed_at, now)
            if not merge.blended + merge.appended:
                return ErrorCode.DEADLINE_EXCEEDED, f"the chunk arrived after all its {len(rows)} steps were due"
            times = np.array([queue.time(queue.first + i) for i in range(len(queue.rows))]) - now
            try:
                safe = check_targets(queue.rows, times, self.arm.measured(self.arm.names), self.arm.names,
                                     self.arm.limits(), self._settings["limit_margin"],
                                     self._settings["max_start_jump"] if from_rest else np.inf)  # fmt: skip
            except EngineError as exc:
                queue.hold()
                self.arm.hold(self._node.get_logger().warning)
                return exc.code, exc.message
            queue.rows = safe.positions  # the plan is what the arm was told
        refused = await self.arm.send(now, times, safe)
        if refused:
            self.hold(plan)
            return ErrorCode.ABORTED, refused
        sent_at = self.arm.now()
        plan.missed = 0
        plan.latency.add(sent_at - observed_at)
        trace = ChunkTrace(task_id=run.task_id, chunk_id=plan.sent, observed_at=stamp_of(observed_at),
                           infer_ms=infer_s * 1e3, latency_ms=(sent_at - observed_at) * 1e3, dropped=merge.dropped,
                           blended=merge.blended, appended=merge.appended, clamped=safe.clamped,
                           underruns=queue.underruns)  # fmt: skip
        trace.header.stamp = stamp_of(sent_at)
        self._traces.publish(trace)
        plan.sent += 1
        return None

    def miss(self, run: GoalRun, plan: ArmPlan, code: ErrorCode, message: str) -> None:
        """Count a missed chunk; end the goal (the arm held) after ``max_missed_chunks`` in a row."""
        plan.missed += 1
        plan.missed_total += 1
        self._node.get_logger().warning(f"{run.task_id}: chunk missed ({plan.missed} in a row): {message}")
        if plan.missed >= self._settings["max_missed_chunks"]:
            self.hold(plan)
            run.end(code, f"{plan.missed} chunks in a row missed (max_missed_chunks), the arm holds: {message}")

    def tick(self, run: GoalRun, plan: ArmPlan) -> None:
        """Every period: end the goal, holding the arm, on a controller fault or stale joint states; count underruns."""
        fault = self.arm.take_fault()
        if fault:
            self.hold(plan)
            run.end(ErrorCode.ABORTED, fault)
            return
        try:
            self.arm.measured(self.arm.names)
        except EngineError as exc:
            self.hold(plan)
            run.end(exc.code, exc.message)
            return
        with plan.lock:
            plan.queue.check_underrun(self.arm.now())

    def hold(self, plan: ArmPlan | None) -> None:
        if plan is not None:
            with plan.lock:
                plan.queue.hold()
        self.arm.hold(self._node.get_logger().warning)
