"""`instruction_node`: the FollowInstruction action on `/follow_instruction`, streaming action chunks at `rate_hz`.

Hierarchical, because a text-only model (SmolLM2) has no action head: the language head (`/oxygen/infer`,
task_type instruction) reads the instruction with the scene text and narrates which object to take, every
`narration_period_s`; a low-level controller here (``oxygen_ros.control.reach``) turns the target into
end-effector waypoint chunks, sent at exactly ``rate_hz`` by the goal's clock thread (see ``_keep_time``) that
never waits on the model. The target is the detected object (newest camera frame on `/oxygen/observation`, looked
up every PERCEPTION_PERIOD_S) that the instruction names by colour or shape, else the one the narration names;
with none, the arm holds still.

Each goal first asks `/oxygen/infer` for actions (want_actions, deadline 1/rate_hz). A VLA model (pi05-*) answers
with a chunk and the goal runs on the model: each tick asks for the next chunk (one in flight at a time, due
within the period) and publishes it on arrival; a late one is dropped, so the rate is what the model sustains. FAILED_PRECONDITION (no action head) selects the
controller path. Every chunk goes out on `arm/action_chunk` (ActionChunk: the controller's are Cartesian
end-effector waypoints, ``reach.ACTION_NAMES``, never dressed as joints) and as feedback with the newest narration;
a joint-space model's chunk also goes out on `arm/joint_trajectory` (trajectory_msgs/JointTrajectory for a
ros2_control joint_trajectory_controller) when `joint_names` names as many joints as it has action dimensions. The result
counts the chunks and measures the rate: (chunks - 1) / (time between the first and the last chunk).

A bad goal (empty instruction, rate_hz < 0.01 or > max_rate_hz, duration_s < 0, NaN or over a day) is accepted and
aborted with INVALID_ARGUMENT, an instruction over ``bounds.TEXT_CHARS`` with OUT_OF_RANGE; UNAVAILABLE when
`/oxygen/infer` is absent. A newer goal preempts the running one (CANCELLED, "preempted"). Once streaming, a failing
language head only shows in the narration: the arm keeps its rate. A stream keeps counts, not a list per chunk, so
one that runs until cancelled holds the same memory after a day as after a second.
"""

import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import ParameterUninitializedException
from rclpy.parameter import Parameter
from oxygen_ros.nodes.executor import Executor
from rclpy.timer import Timer
from std_msgs.msg import Header
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from oxygen_ros.action import FollowInstruction
from oxygen_ros.control import reach
from oxygen_ros.errors import NO_ACTION_HEAD, EngineError, ErrorCode
from oxygen_ros.msg import ActionChunk
from oxygen_ros import bounds
from oxygen_ros.nodes import latest_frame
from oxygen_ros.nodes.convert import action_chunk
from oxygen_ros.nodes.declare import Ranges, Table, keep_positive
from oxygen_ros.nodes.goal_run import GoalRun
from oxygen_ros.nodes.spin import run
from oxygen_ros.nodes.task_action import TaskActionNode
from oxygen_ros.srv import Infer

NODE_NAME = "instruction_node"
BASE_FRAME = "base_link"
PERCEPTION_PERIOD_S = 0.2  # how often the target is looked up in the newest frame
PARAMETERS: Table = {
    "max_rate_hz": (50.0, "highest rate_hz a goal may ask for; above it the goal is aborted INVALID_ARGUMENT"),
    "horizon": (10, "waypoints per action chunk of the controller"),
    "narration_period_s": (3.0, "how often the language head is asked to narrate, seconds"),
    "max_new_tokens": (24, "narration token budget"),
    "infer_timeout_s": (60.0, "longest wait for /oxygen/infer to answer, seconds"),
    "service_wait_s": (1.0, "how long to wait for /oxygen/infer to appear before aborting UNAVAILABLE, seconds"),
    **latest_frame.PARAMETERS,
}
JOINT_NAMES = "joint_names"  # a string array: not in the table (an empty array cannot be a YAML default)
RANGES: Ranges = {
    "max_rate_hz": (0.0, 1000.0),
    "horizon": (1, 1000),
    "narration_period_s": (0.0, 3600.0),
    "max_new_tokens": (1, 4096),
    "infer_timeout_s": (0.0, 3600.0),
    "service_wait_s": (0.0, 600.0),
}


@dataclass
class Stream:
    """A running goal's state, touched by its chunk tick (one at a time) and its narration coroutine."""

    run: GoalRun
    instruction: str
    rate_hz: float
    duration_s: float
    vla: bool
    started: float = field(default_factory=time.monotonic)  # when streaming began (duration_s counts from it)
    arm: reach.Arm = field(default_factory=reach.Arm)
    narration: str = ""
    chunks_sent: int = 0
    first_chunk_at: float = 0.0  # when the first and the latest chunk went out (monotonic seconds)
    last_chunk_at: float = 0.0
    awaiting_chunk: bool = False  # VLA path: a chunk request is in flight
    target: tuple[float, float] | None = None  # where the named object is (base_link, metres); None = not seen
    clock: threading.Thread | None = None  # runs the ticks


class InstructionNode(TaskActionNode[Stream]):
    """Raises ValueError naming a bad parameter."""

    def __init__(self, **kwargs: Any) -> None:
        numbers = list(RANGES)  # all read once (settings): read-only, so a later set is refused, not ignored
        super().__init__(
            NODE_NAME, FollowInstruction, "follow_instruction", PARAMETERS, numbers, RANGES, list(PARAMETERS), **kwargs
        )
        keep_positive(self, *numbers)
        description = "the arm's joints, in the order of a joint-space model's action dimensions (ros2_control)"
        self.declare_parameter(
            JOINT_NAMES, Parameter.Type.STRING_ARRAY, ParameterDescriptor(description=description, read_only=True)
        )
        self._joint_names = joint_names(self)
        self._chunks = self.create_publisher(ActionChunk, "arm/action_chunk", 10)
        self._trajectories = self.create_publisher(JointTrajectory, "arm/joint_trajectory", 10)

    def check(self, goal: FollowInstruction.Goal) -> None:
        bounds.text("instruction", goal.instruction, bounds.TEXT_CHARS)
        if not goal.instruction.strip():
            raise EngineError(ErrorCode.INVALID_ARGUMENT, "the instruction is empty")
        bounds.within("rate_hz", goal.rate_hz, bounds.MIN_RATE_HZ, self.settings["max_rate_hz"], note=" Hz")
        bounds.within("duration_s", goal.duration_s, 0.0, bounds.GOAL_DURATION_S, note=" s (0 = until cancelled)")

    async def prepare(self, run: GoalRun, goal: FollowInstruction.Goal) -> Stream | None:
        """Ask for actions once: the answer decides between the model's action head and the controller."""
        probe = await self.infer.call(self._actions_request(run.task_id, goal.instruction, goal.rate_hz))
        vla = probe.success or probe.error_code == ErrorCode.DEADLINE_EXCEEDED.value
        no_head = probe.error_code == ErrorCode.FAILED_PRECONDITION.value and NO_ACTION_HEAD in probe.message
        if not (vla or no_head):  # e.g. UNAVAILABLE, or FAILED_PRECONDITION: the inference node is not active
            run.end(probe.error_code, probe.message)
            return None
        stream = Stream(run, goal.instruction, goal.rate_hz, goal.duration_s, vla)
        mode = "the model's action head" if vla else "the controller (the model has no action head)"
        self.get_logger().info(f"{run.task_id}: {goal.instruction!r} at {goal.rate_hz:g} Hz from {mode}")
        if probe.success:
            self._send(stream, probe.actions)
        return stream

    def start(self, stream: Stream) -> list[Timer]:
        self._perceive(stream)
        stream.clock = threading.Thread(
            target=self._keep_time, args=(stream,), name=f"{stream.run.task_id} clock", daemon=True
        )
        stream.clock.start()
        self.executor.create_task(self._narrate, stream)
        period = self.settings["narration_period_s"]
        return [
            self.create_timer(PERCEPTION_PERIOD_S, partial(self._perceive, stream), callback_group=self.group),
            self.create_timer(period, partial(self._narrate, stream), callback_group=self.group),
        ]

    def finish(self, stream: Stream, result: FollowInstruction.Result) -> None:
        stream.clock.join()  # it stops as soon as the goal ends
        n, span = stream.chunks_sent, stream.last_chunk_at - stream.first_chunk_at
        result.chunks_sent = n
        result.achieved_rate_hz = (n - 1) / span if n > 1 else 0.0

    def _actions_request(self, task_id: str, instruction: str, rate_hz: float) -> Infer.Request:
        return Infer.Request(
            task_id=task_id,
            task_type="instruction",
            prompt=instruction,
            want_actions=True,
            max_new_tokens=1,  # the engine wants a text budget even when no text is asked for
            deadline_s=1.0 / rate_hz,
        )

    def _keep_time(self, stream: Stream) -> None:
        """Tick at ``rate_hz`` on the monotonic clock until the goal ends. Its own thread, not an executor timer:
        the executor's dispatch waits behind every other callback of the process (camera rendering, the model's
        Python) and rcl drops a timer's late periods, which cost ~5% of a 10 Hz stream here. A tick that comes
        late is still sent at once (the next one keeps the schedule); after a stall of over a period the lost
        periods are lost, not sent in a burst."""
        period = 1.0 / stream.rate_hz
        # a VLA probe's chunk was the first period's
        due = time.monotonic() + (period if stream.chunks_sent else 0.0)
        while True:
            now = time.monotonic()
            if due < now - period:
                due = now
            if stream.run.stop.wait(max(0.0, due - now)):  # the goal ended: stop at once
                return
            try:
                self._tick(stream)
            except Exception as exc:  # without its clock the goal could never end: end it, saying why
                stream.run.end(ErrorCode.INTERNAL, f"the chunk clock failed: {type(exc).__name__}: {exc}")
                return
            due += period

    def _tick(self, stream: Stream) -> None:
        """One control period: end the goal when due, else publish the next chunk (controller) or ask for it (VLA)."""
        if stream.run.end_if_cancelled():
            return
        now = time.monotonic()
        if stream.duration_s and now - stream.started >= stream.duration_s - 0.5 / stream.rate_hz:
            stream.run.end()
            return
        if stream.vla:
            if not stream.awaiting_chunk:
                stream.awaiting_chunk = True
                self.executor.create_task(self._ask_actions, stream)
            return
        rows, stream.arm = reach.chunk(stream.arm, stream.target, self.settings["horizon"], 1.0 / stream.rate_hz)
        self._send(
            stream, action_chunk(rows, stream.run.task_id, 1.0 / stream.rate_hz, self.get_clock().now().to_msg())
        )

    def _perceive(self, stream: Stream) -> None:
        """Find the named object in the newest frame (off the tick: detection takes milliseconds)."""
        detections = self.frame.detections()
        objects = detections.objects if detections else []
        found = reach.find_target([stream.instruction, stream.narration], objects)
        stream.target = (found.ahead_cm / 100.0, found.left_cm / 100.0) if found else None

    def _send(self, stream: Stream, chunk: ActionChunk) -> None:
        if not stream.run.running:
            return
        stream.last_chunk_at = time.monotonic()
        if not stream.chunks_sent:
            stream.first_chunk_at = stream.last_chunk_at
        stream.chunks_sent += 1
        chunk.header.frame_id = BASE_FRAME
        self._chunks.publish(chunk)
        if stream.vla and len(self._joint_names) == chunk.action_dim:
            self._trajectories.publish(trajectory(chunk, self._joint_names))
        elif stream.vla:
            self.get_logger().warning(
                f"no arm/joint_trajectory: the model's {chunk.action_dim} action dimensions need as many "
                f"{JOINT_NAMES}, {len(self._joint_names)} are set", throttle_duration_sec=10.0)  # fmt: skip
        feedback = FollowInstruction.Feedback(chunk=chunk, narration=stream.narration)
        stream.run.goal_handle.publish_feedback(feedback)

    async def _ask_actions(self, stream: Stream) -> None:
        try:
            request = self._actions_request(stream.run.task_id, stream.instruction, stream.rate_hz)
            out = await self.infer.call(request)
        finally:
            stream.awaiting_chunk = False
        if out.success:
            self._send(stream, out.actions)
        elif out.error_code != ErrorCode.DEADLINE_EXCEEDED.value:  # a late chunk is just skipped
            stream.run.end(out.error_code, out.message)

    async def _narrate(self, stream: Stream) -> None:
        """The language head says which object the robot is reaching for; its answer is the narration."""
        prompt = f"The robot was told: {stream.instruction}\nWhich object is it reaching for, and where?"
        text = await self.language_head(stream.run, "instruction", prompt)
        if text is not None:
            stream.narration = text


def joint_names(node: InstructionNode) -> list[str]:
    """The configured joint names ([] when none are: then no JointTrajectory is sent); ValueError for an empty or
    repeated name, or more than ``bounds.STATE`` of them."""
    try:
        names = list(node.get_parameter(JOINT_NAMES).value)
    except ParameterUninitializedException:
        return []
    if len(names) > bounds.STATE or len(set(names)) != len(names) or not all(names):
        node.destroy_node()
        raise ValueError(f"parameter {JOINT_NAMES} must be distinct non-empty names (at most {bounds.STATE}): {names}")
    return names


def trajectory(chunk: ActionChunk, names: list[str]) -> JointTrajectory:
    """A joint-space chunk's rows as trajectory points one period apart, for a joint_trajectory_controller."""
    rows = np.asarray(chunk.actions, dtype=np.float64).reshape(chunk.horizon, chunk.action_dim)
    points = []
    for i, row in enumerate(rows, start=1):
        seconds = i * chunk.period_s
        since = Duration(sec=int(seconds), nanosec=int(round(seconds % 1 * 1e9)) % 1_000_000_000)
        points.append(JointTrajectoryPoint(positions=row.tolist(), time_from_start=since))
    return JointTrajectory(header=Header(stamp=chunk.header.stamp), joint_names=names, points=points)


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros instruction_node`."""
    return run(InstructionNode, partial(Executor, num_threads=3), NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
