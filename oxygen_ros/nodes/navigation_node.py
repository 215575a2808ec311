"""`navigation_node`: the Navigate action on `navigate`: drive to a target pose, stop for obstacles, explain why.

Frames (REP 105): odometry is in `odom_frame` (`odom`; other frames are ignored with a warning); a target is in
`map_frame` (`map`; '' is taken as it) or in `odom_frame`, and a map target is brought into odom through TF (the
map -> odom transform at the odometry's time, within `transform_tolerance_s`; tf2_ros where installed, else
``oxygen_ros.nodes.tf``), again on every replan, so a localization correction moves the goal with the map. camera_sim
simulates this tree (see ``sim_frames``).

Who drives (`nav2`): a goal waits up to `nav2_wait_s` for a nav2 NavigateToPose server on `nav2_action` (``auto``
and ``always``; ``never`` does not look). With one, the goal is handed to nav2, whose feedback (pose, elapsed,
remaining) and result are relayed (``nav2_handoff``); nav2 plans, avoids obstacles and commands the base. Without
(``always``: UNAVAILABLE), the node drives itself only when `allow_builtin_driver` is true AND every configured
obstacle source is live (``obstacle_sources``: a LaserScan on `scan_topic`, a depth image on `depth_topic`, and in
simulation only, `use_sim`, the camera detector) and no goal of ours that nav2 took may still be driven by it (its
cancel unconfirmed); otherwise the goal fails FAILED_PRECONDITION naming what is missing, and a zero Twist is sent,
so a robot never drives blind nor beside nav2. The built-in driver: at `replan_rate_hz` it reads
the newest odometry, transform and obstacle points, replans a straight line to the target (nav_msgs/Path on `plan`,
in odom) and sends a unicycle command (TwistStamped, or Twist, on `cmd_vel`, ``oxygen_ros.control.unicycle``) that
lasts a period and a half from its obstacle check (above 10 Hz a period and 50 ms): a later replan finds the base
stopped (``command_deadline``).
Safety stop: when an obstacle point ahead is within `safety_clearance_cm` of the robot's footprint (a circle of
`robot_radius_m` about `base_frame`; ``oxygen_ros.control.obstacles``), or odometry or an obstacle source is older
than `input_timeout_s`, it sends a zero Twist and the feedback says why; it drives again once the way is clear. Its
speed is capped so that what it travels unseen by the check, and then braking at `max_decel_mps2`, stays within the
clearance (``unicycle.top_speed``). The target's orientation is not controlled: the goal is reached on position (the
base ends facing the way it drove).

The language head (`oxygen/infer`, task_type navigation) is asked about the scene every `reasoning_period_s`; its
answer (schema-checked JSON: ``nodes/reasoning.py``) is the feedback's reasoning. It never gates motion: a text
model is too slow to steer at the replan rate.

Results: success within `goal_tolerance_m` (or when nav2 succeeds); INVALID_ARGUMENT for a NaN/inf target or a frame
other than map_frame/odom_frame (accepted, then aborted); OUT_OF_RANGE for a target farther than
`max_target_distance_m` from the robot (checked on the goal when its transform is known, again before nav2 or the
built-in driver takes it, on each replan and on each nav2 feedback in the target's frame) or a hint over
``bounds.TEXT_CHARS``; FAILED_PRECONDITION when neither nav2 nor the built-in driver may drive (above); TF_ERROR when
no map -> odom transform came within `transform_wait_s` of the goal, or none usable (or none placing an obstacle
source's points) for `blocked_timeout_s` while driving (the robot stands still meanwhile), or, for a target in odom,
once the odometry restarted (its pose jumped, or time went back: the target was of the frame before); UNAVAILABLE when
`oxygen/infer` (or, with ``always``, nav2) is absent, or when odometry or an obstacle source stayed older than
`input_timeout_s` for `blocked_timeout_s`; OBSTACLE after `blocked_timeout_s` stopped for an obstacle (each reason
counts its own time); DEADLINE_EXCEEDED after `max_duration_s`; CANCELLED when cancelled or preempted by a newer goal;
nav2's failures as TF_ERROR, DEADLINE_EXCEEDED or ABORTED with its code and text. Every ending of a goal the node
drove itself sends a zero Twist; one nav2 drove cancels nav2's goal and reports once nav2 confirmed (a cancel nav2 did
not confirm is named in the result's message). The numbers other than the waits may be changed while the node runs
(`ros2 param set`, within their ranges): each replan reads them; the replan and reasoning rates apply from the next
goal. The rest is read once and read-only. `clear_obstacle_memory` (std_srvs/Trigger) forgets the obstacle points the
sources remember beyond their newest readings. Names are relative (`navigate`, `plan`, `odom`, `cmd_vel`, `scan`,
`navigate_to_pose`, `clear_obstacle_memory`), so a namespace moves them; TF is on /tf and /tf_static, as tf2's is.
"""

import math
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from geometry_msgs.msg import PoseStamped, Twist
from nav2_msgs.action import NavigateToPose
from nav_msgs.msg import Odometry, Path
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rclpy.task import Future
from rclpy.timer import Timer
from std_srvs.srv import Trigger

from oxygen_ros.action import Navigate
from oxygen_ros.control import obstacles, unicycle
from oxygen_ros.control.unicycle import Pose2D
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros import bounds
from oxygen_ros.nodes import command_deadline, obstacle_sources, reasoning, velocity
from oxygen_ros.nodes.command_deadline import CommandDeadline
from oxygen_ros.nodes.declare import current, keep_positive
from oxygen_ros.nodes.executor import Executor
from oxygen_ros.nodes.future_wait import wait
from oxygen_ros.nodes.goal_run import GoalRun
from oxygen_ros.nodes.nav2_handoff import CANCEL_TRIES, POLL_S, Nav2Handoff, duration
from oxygen_ros.nodes.odometry_history import Odom, OdometryHistory
from oxygen_ros.nodes.qos import STOP_ACK_S
from oxygen_ros.nodes.navigation_params import PARAMETERS, POSITIVE, RANGES, READ_ONCE, settings_problem
from oxygen_ros.nodes.spin import run
from oxygen_ros.nodes.task_action import TaskActionNode
from oxygen_ros.nodes.tf.backend import Transforms
from oxygen_ros.nodes.tf.rigid import Rigid, of_pose, unit_rotation
from oxygen_ros.nodes.tf.tree import TransformUnavailable
from oxygen_ros.nodes.stamps import StillClock, nanoseconds, reading_age

NODE_NAME = "navigation_node"
HANDOFF_SLACK_S = 1.0  # beyond nav2's answers: the executor's turns between them


@dataclass
class Trip:
    """A running goal's state, touched by its replan tick (one at a time) and its reasoning coroutine."""

    run: GoalRun
    target: PoseStamped  # as the goal gave it, frame_id filled in
    instruction: str
    start: float
    nav2: bool
    distance: float = math.nan
    reasoning: str = ""
    blocked: tuple[ErrorCode, float] | None = None  # why the robot stands still, and since when
    replan_hz: float = 0.0  # its replan timer's rate, fixed when it starts
    cover_s: float = 0.0  # how long after its obstacle check a command lasts unless a newer one comes
    clock: StillClock | None = None  # the node's clock as the watchdog last saw it move, and when (steady)
    watch_s: float = math.inf  # the node's clock still for this long (steady time) stops the base
    handoff: Future | None = None  # nav2's drive (its result: '' or an unconfirmed cancel), when nav2 drives
    handoff_s: float = 0.0  # how long its ending may take once our goal ended: the goal's answer and the cancels
    nav2_took: bool = False  # nav2 accepted the goal: it replaced whatever nav2 drove before
    odom_epoch: int = 0  # the odometry's epoch when the goal came: a target given in odom is of that frame


class NavigationNode(TaskActionNode[Trip]):
    """Raises ValueError naming a bad parameter."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, Navigate, "navigate", PARAMETERS, POSITIVE, RANGES, READ_ONCE, **kwargs)
        keep_positive(self, *POSITIVE)
        problem = settings_problem(self.settings)
        if problem:
            Node.destroy_node(self)
            raise ValueError(problem)
        self._replans = MutuallyExclusiveCallbackGroup()  # one replan at a time, never behind other callbacks
        self._command_lock = threading.Lock()  # a command is sent for a goal only while it runs, and stops win
        self._odometry = OdometryHistory()
        self._started = time.monotonic()  # (the node's clock is 0 under use_sim_time until /clock arrives)
        self._map, self._odom_frame = self.settings["map_frame"], self.settings["odom_frame"]
        self._base = self.settings["base_frame"]
        self._transforms = Transforms(self, self.settings["transform_tolerance_s"])
        self._nav2 = Nav2Handoff(self, self.settings["nav2_action"], self.group)
        self._sources = obstacle_sources.configured(self, self.settings, self.frame, self._transforms)
        self._handoff: Trip | None = None  # the last goal handed to nav2
        # why nav2 may still drive a goal of ours ('' = none), and the trip that left it: cleared once that trip is
        # seen to end after all, or a later goal of ours was taken by nav2 (it replaces that one)
        self._nav2_loose, self._loose_trip = "", None
        odom_topic = self.settings["odom_topic"]
        self._odom_name = self.resolve_topic_name(odom_topic)  # the full name, as messages quote it
        # best effort takes a reliable publisher's (diff_drive_controller) and a best-effort driver's alike; one at a
        # time, in order (an older pose after a newer reads as time going back: the history and memory restart)
        self.create_subscription(Odometry, odom_topic, self._on_odom, qos_profile_sensor_data,
                                 callback_group=MutuallyExclusiveCallbackGroup())  # fmt: skip
        self._stamped = self.settings["cmd_vel_stamped"]
        self._cmd_vel = self.create_publisher(velocity.command_type(self._stamped), self.settings["cmd_vel_topic"], 10)
        self._plan = self.create_publisher(Path, "plan", 1)
        # in the replans' group: the obstacle memory is read and cleared one at a time
        self.create_service(Trigger, "clear_obstacle_memory", self._clear_memory, callback_group=self._replans)
        warn = partial(self.get_logger().warning, throttle_duration_sec=5.0)
        self._deadline = CommandDeadline(self._command_lock, lambda: self.get_clock().now().nanoseconds,
                                         partial(self._publish, Twist()), warn)  # fmt: skip

    def _clear_memory(self, _: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """Forget the obstacle points the sources remember beyond their newest readings (nav2's costmap clearing): for
        a base held by an obstacle that left where no sensor could see it. What the sensors see now still stops it."""
        forgotten = {source.name: source.forget() for source in self._sources}
        response.success = True
        response.message = "forgot " + (", ".join(f"{n} points of the {name}" for name, n in forgotten.items())
                                        or "nothing: no obstacle source is configured")  # fmt: skip
        self.get_logger().info(f"clear_obstacle_memory: {response.message}")
        return response

    def release(self) -> None:
        """The command deadline's thread ended, and the last zero Twist (``destroy_node`` sent it) acknowledged by the
        base's subscribers before the node and rclpy go, or STOP_ACK_S passed; then the nav2 client."""
        self._deadline.close()
        self._cmd_vel.wait_for_all_acked(Duration(seconds=STOP_ACK_S))
        self._nav2.destroy()

    def _on_odom(self, msg: Odometry) -> None:
        if msg.header.frame_id not in ("", self._odom_frame):  # a pose in another frame is no odometry to drive by
            self.get_logger().warning(f"ignoring odometry in frame {msg.header.frame_id!r}: odometry must be in "
                                      f"{self._odom_frame!r}", throttle_duration_sec=5.0)  # fmt: skip
            return
        try:
            body = unit_rotation(of_pose(msg.pose.pose), "the pose")
        except ValueError as exc:  # no heading to steer by: it goes stale
            self.get_logger().warning(f"ignoring odometry on {self._odom_name}: {exc}", throttle_duration_sec=5.0)
            return
        pose = Pose2D(body.translation[0], body.translation[1], body.yaw)
        if not all(math.isfinite(v) for v in (pose.x, pose.y, pose.yaw)):  # no basis for driving: it goes stale
            self.get_logger().warning(f"ignoring a non-finite pose on {self._odom_name}: {pose}",
                                      throttle_duration_sec=5.0)  # fmt: skip
            return
        arrival = self.get_clock().now().nanoseconds
        self._odometry.add(Odom(pose, nanoseconds(msg.header.stamp) or arrival, arrival))  # a zero stamp ("no time") is its arrival

    def check(self, goal: Navigate.Goal) -> None:
        bounds.text("instruction", goal.instruction, bounds.TEXT_CHARS)
        target = goal.target
        p, q = target.pose.position, target.pose.orientation
        axes = {f"position.{a}": getattr(p, a) for a in "xyz"} | {f"orientation.{a}": getattr(q, a) for a in "xyzw"}
        for name, value in axes.items():
            bounds.finite(f"target pose {name}", value)
        bounds.text("target frame_id", target.header.frame_id, bounds.ID_CHARS)
        if target.header.frame_id not in ("", self._map, self._odom_frame):
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"the target must be in frame {self._map!r} or "
                              f"{self._odom_frame!r}, got {target.header.frame_id!r}")  # fmt: skip
        self._check_reach_if_known(target)

    def _check_reach_if_known(self, target: PoseStamped) -> None:
        """OUT_OF_RANGE when the target is beyond `max_target_distance_m`, if odometry and TF place it now (if not,
        prepare waits for them, and each replan or nav2 feedback checks the distance)."""
        odom = self._odometry.latest()
        if odom is not None:
            try:
                self._check_reach(odom.pose, self._in_odom(target, self._frame_of(target), odom.stamp_ns))
            except TransformUnavailable:
                pass

    async def prepare(self, run: GoalRun, goal: Navigate.Goal) -> Trip | None:
        if not await self.infer.available():
            run.end(ErrorCode.UNAVAILABLE, f"{self.infer.service} is not available (is the inference node running?)")
            return None
        target = PoseStamped(header=goal.target.header, pose=goal.target.pose)
        target.header.frame_id = self._frame_of(goal.target)
        mode, wait_s = self.settings["nav2"], self._nav2_wait_s()
        nav2 = mode != "never" and await self._nav2.ready(wait_s)
        if mode == "always" and not nav2:
            run.end(ErrorCode.UNAVAILABLE, f"no nav2 server on {self._nav2.name} within {wait_s:g} s")
            return None
        if self._handoff is not None:  # the goal before: nav2 must have its cancel first, or bt_navigator cancelling
            await self.settle(self._handoff)  # it would end this goal's too (it checks cancels first); and our driver
        if not nav2:  # must not command the base beside a nav2 that may still drive
            problem = await self._builtin_driver_problem(mode) or self._nav2_loose
            if problem:
                self._send(Twist())  # whatever commanded the base before, nothing here lets it move now
                run.end(ErrorCode.FAILED_PRECONDITION, problem)
                return None
        # nav2 is handed a goal only within reach too: with odometry, its transform is waited for (nav2 needs it too)
        placed = await self._transform_ready(target.header.frame_id) if not nav2 or self._odometry.latest() else False
        if not nav2 and not placed:
            wait_tf = self.settings["transform_wait_s"]
            run.end(ErrorCode.TF_ERROR, f"no transform {self._odom_frame} <- {target.header.frame_id} within "
                                        f"{wait_tf:g} s (is localization, or the simulator, publishing TF?)")  # fmt: skip
            return None
        try:
            self._check_reach_if_known(target)
        except EngineError as exc:
            run.end(exc.code, exc.message)
            return None
        p = target.pose.position
        self.get_logger().info(f"{run.task_id}: to ({p.x:.2f}, {p.y:.2f}) in {target.header.frame_id} "
                               f"{'by nav2' if nav2 else 'straight'} {goal.instruction!r}")  # fmt: skip
        return Trip(run, target, goal.instruction.strip(), time.monotonic(), nav2, odom_epoch=self._odometry.epoch)

    def _nav2_wait_s(self) -> float:
        """How long this goal waits for nav2: ``always``, or once nav2 was seen (it may be restarting), the whole
        `nav2_wait_s`; ``auto`` before nav2 was ever seen, what is left of `nav2_wait_s` since the node started (a
        nav2 coming up with the robot is waited for; one that is not there is not waited for again every goal)."""
        wait_s = self.settings["nav2_wait_s"]
        if self.settings["nav2"] == "always" or self._nav2.seen:
            return wait_s
        return min(wait_s, max(0.0, wait_s - (time.monotonic() - self._started)))

    async def _builtin_driver_problem(self, mode: str) -> str:
        """Why the built-in driver may not drive this goal ('' = it may): it must be allowed, and every configured
        obstacle source live (waiting up to `input_timeout_s` for the first message of each)."""
        if not self.settings["allow_builtin_driver"]:
            why = f"no nav2 server on {self._nav2.name} (nav2_wait_s {self.settings['nav2_wait_s']:g})" \
                if mode == "auto" else "nav2 is off (nav2: never)"  # fmt: skip
            return f"{why}, and the built-in driver is off (allow_builtin_driver: false): nothing may drive the base"
        if not self._sources:
            return ("the built-in driver needs a live obstacle source and none is configured: set scan_topic "
                    "(sensor_msgs/LaserScan) or depth_topic (a depth image); the camera detector counts only in "
                    "simulation (use_sim)")  # fmt: skip
        timeout, waited = current(self, PARAMETERS)["input_timeout_s"], 0.0
        while True:
            now_ns = self.get_clock().now().nanoseconds
            stale = [source.name for source in self._sources if source.age(now_ns) > timeout]
            if not stale or waited >= timeout:
                break
            await wait(self, None, POLL_S)
            waited += POLL_S
        if stale:
            return f"the built-in driver needs every obstacle source live: no {', '.join(stale)} in {timeout:g} s"
        return ""

    async def _transform_ready(self, frame: str) -> bool:
        """Whether ``frame`` -> odom is known, waiting up to `transform_wait_s` for it."""
        waited = 0.0
        while True:
            try:
                self._transforms.lookup(self._odom_frame, frame)
                return True
            except TransformUnavailable:
                if waited >= self.settings["transform_wait_s"]:
                    return False
            await wait(self, None, POLL_S)
            waited += POLL_S

    def start(self, trip: Trip) -> list[Timer]:
        settings = current(self, PARAMETERS)
        self.executor.create_task(self._reason, trip)
        if trip.nav2:
            answer_s = settings["service_wait_s"]
            took = partial(setattr, trip, "nav2_took", True)
            trip.handoff = self.executor.create_task(self._nav2.drive, trip.run, trip.target,
                                                     partial(self._relay, trip), answer_s, took)  # fmt: skip
            # ended as it starts: the goal's answer, a late one, and every cancel, each within answer_s
            trip.handoff_s = (CANCEL_TRIES + 2) * answer_s + HANDOFF_SLACK_S
            self._handoff = trip
        tick = self._watch if trip.nav2 else self._tick
        trip.replan_hz = settings["replan_rate_hz"]
        trip.cover_s = command_deadline.cover_s(trip.replan_hz)
        trip.watch_s = max(settings["input_timeout_s"], 3.0 / trip.replan_hz)
        trip.clock = StillClock(self.get_clock().now().nanoseconds, time.monotonic())
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        return [
            self.create_timer(1.0 / trip.replan_hz, partial(tick, trip), callback_group=self._replans),
            self.create_timer(settings["reasoning_period_s"], partial(self._reason, trip), callback_group=self.group),
            self.create_timer(trip.watch_s / 2, partial(self._watchdog, trip), callback_group=self.group, clock=steady),
        ]

    def _watchdog(self, trip: Trip) -> None:
        """On the steady clock, beside the replan ticks, which run on the node's clock: under use_sim_time that clock
        stops with /clock (a simulator or bridge gone), and with it every tick, a cancel and the deadline. The node's
        clock still for ``watch_s``: the base stops and the goal ends UNAVAILABLE (a slow simulation's clock moves)."""
        if trip.run.end_if_cancelled():
            return
        still_s = trip.clock.still_for(self.get_clock().now().nanoseconds, time.monotonic())
        if trip.run.running and still_s > trip.watch_s:
            trip.run.end(ErrorCode.UNAVAILABLE, f"the node's clock has not moved for {still_s:.1f}"
                         " s (use_sim_time without /clock?): no replan runs; the base was stopped")  # fmt: skip
            self._send(Twist())

    async def settle(self, trip: Trip) -> str:
        """nav2's goal over (its result came) or its cancel answered before our goal's result is sent."""
        if trip.handoff is None:
            return ""
        done, problem = await wait(self, trip.handoff, trip.handoff_s)
        if not done:
            problem = f"nav2's goal was not seen to end within {trip.handoff_s:g} s: it may still drive"
        if problem and self._handoff is trip:
            self._loose_trip = trip
            self._nav2_loose = f"the built-in driver would command the base beside nav2 ({problem}): stop nav2's " \
                "goal and send this one to nav2, or restart this node"  # fmt: skip
        elif not problem and (trip.nav2_took or self._loose_trip is trip):
            self._nav2_loose, self._loose_trip = "", None
        if done and self._handoff is trip:
            self._handoff = None  # over: the next goal waits for nothing
        return problem

    def settle_s(self) -> float:
        """The handoff still open (its goal's answer and every cancel, each within service_wait_s), else 0."""
        trip = self._handoff
        return trip.handoff_s if trip is not None else 0.0

    def finish(self, trip: Trip, result: Navigate.Result) -> None:
        result.distance_remaining = trip.distance  # NaN when no odometry ever arrived: unknown, not "arrived"

    def stopped(self) -> None:
        """No goal runs: the base stands (sent whoever drove last; nav2 stops itself when its goal is cancelled)."""
        self._send(Twist())

    def _send(self, twist: Twist, trip: Trip | None = None, checked_ns: int = 0) -> None:
        """``twist`` to the base; for ``trip``, only while it runs and no cancel was asked: a tick computed before the
        goal ended never moves the base after the stop (every stop is sent under the same lock), nor after a cancel
        (the next tick ends the goal). A trip's motion command lasts its cover_s from its obstacle check at node-clock
        ``checked_ns`` (less the deadline's polling): no newer one by then, the deadline stops the base."""
        with self._command_lock:
            if trip is not None and (not trip.run.running or trip.run.goal_handle.is_cancel_requested):
                return
            self._publish(twist)
            if trip is not None and twist != Twist():
                self._deadline.arm(checked_ns, command_deadline.lasts_s(trip.cover_s))
            else:
                self._deadline.disarm()

    def _publish(self, twist: Twist) -> None:
        """``twist`` on cmd_vel now (under the command lock)."""
        self._cmd_vel.publish(velocity.command(twist, self._stamped, self.get_clock().now().to_msg(), self._base))


    def _frame_of(self, target: PoseStamped) -> str:
        return target.header.frame_id or self._map

    def _in_odom(self, target: PoseStamped, frame: str, stamp_ns: int) -> tuple[float, float]:
        """The target's position in odom at ``stamp_ns``; TransformUnavailable when TF has no such transform."""
        to_odom = Rigid() if frame == self._odom_frame else self._transforms.lookup(self._odom_frame, frame, stamp_ns)[0]
        x, y, _ = to_odom.apply((target.pose.position.x, target.pose.position.y, target.pose.position.z))
        return x, y

    def _over(self, trip: Trip, settings: dict[str, Any], now: float) -> bool:
        """End the goal when it was cancelled or ran past `max_duration_s`; whether it ended."""
        if trip.run.end_if_cancelled():
            return True
        if now - trip.start > settings["max_duration_s"]:
            trip.run.end(ErrorCode.DEADLINE_EXCEEDED, f"not there after {settings['max_duration_s']:g} s")
            return True
        return False

    def _watch(self, trip: Trip) -> None:
        """nav2 drives: only cancellation and the deadline are ours (ending the goal cancels nav2's)."""
        self._over(trip, current(self, PARAMETERS), time.monotonic())

    def _relay(self, trip: Trip, msg: NavigateToPose.Feedback) -> None:
        """nav2's (checked) feedback as ours."""
        if not trip.run.running:
            return
        if msg.current_pose.header.frame_id == trip.target.header.frame_id:  # its pose places the target: in reach?
            target, position = trip.target.pose.position, msg.current_pose.pose.position
            try:
                self._check_reach(Pose2D(position.x, position.y, 0.0), (target.x, target.y))
            except EngineError as exc:
                trip.run.end(exc.code, exc.message)  # which cancels nav2's goal
                return
        trip.distance = msg.distance_remaining
        feedback = Navigate.Feedback(reasoning=trip.reasoning, distance_remaining=msg.distance_remaining,
                                     current_pose=msg.current_pose, navigation_time=msg.navigation_time,
                                     estimated_time_remaining=msg.estimated_time_remaining)  # fmt: skip
        trip.run.goal_handle.publish_feedback(feedback)

    def _tick(self, trip: Trip) -> None:
        """One replan (``_replan``); an error inside it stops the base and ends the goal INTERNAL, so a replan that
        cannot decide never leaves the last command on the base."""
        try:
            self._replan(trip)
        except Exception as exc:  # whatever broke, the base must not keep the last command
            self.get_logger().error(f"{trip.run.task_id}: the replan failed, stopping: {type(exc).__name__}: {exc}")
            self._send(Twist())
            trip.run.end(ErrorCode.INTERNAL, f"the replan failed ({type(exc).__name__}: {exc}); the base was stopped")

    def _replan(self, trip: Trip) -> None:
        """End the goal when due, else stop (obstacle ahead, stale inputs, no transform), turn in place (an obstacle
        ahead, none touching, and the target to the side) or drive a fresh straight path. Stopped longer than
        `blocked_timeout_s` ends the goal with the reason's code."""
        settings, now = current(self, PARAMETERS), time.monotonic()
        if self._over(trip, settings, now):
            return
        odom = self._odometry.latest()
        now_ns = self.get_clock().now().nanoseconds
        odom_age = reading_age(now_ns, odom.stamp_ns, odom.received_ns) if odom else math.inf
        target, tf_problem = None, ""
        if trip.target.header.frame_id == self._odom_frame and self._odometry.epoch != trip.odom_epoch:
            self._send(Twist())
            trip.run.end(ErrorCode.TF_ERROR, "the odometry restarted (its pose jumped, or time went back): the target, "
                         f"given in {self._odom_frame}, is nowhere now; the base was stopped")  # fmt: skip
            return
        if odom is not None:
            try:
                target = self._in_odom(trip.target, trip.target.header.frame_id, odom.stamp_ns)
                trip.distance = self._check_reach(odom.pose, target)
            except TransformUnavailable as exc:
                tf_problem = f"stopped: {exc}"
            except EngineError as exc:
                trip.run.end(exc.code, exc.message)
                return
            # there only by odometry that is still coming: a pose from before it stopped proves nothing
            fresh = odom_age <= settings["input_timeout_s"]
            if trip.distance <= settings["goal_tolerance_m"] and target is not None and fresh:
                trip.run.end(None, f"reached the target, {trip.distance:.2f} m away")
                return
        code, why, may_turn = self._stop_reason(odom_age, tf_problem, settings, now_ns)
        cmd = Twist()
        if code is None or may_turn:
            # the motion the obstacle check has not seen stays within the clearance, whatever max_linear_mps is set
            # to: since the odometry's pose the readings are placed at (its age; a source not moved by odometry, the
            # simulated detector: its frame's) and for as long as the command lasts (cover_s: until the next replan,
            # or the deadline's stop when it is late; from this goal's rate: a rate changed since does not shorten it),
            # and the stop after it at max_decel_mps2
            unseen_s = max([odom_age, *(source.unshifted_s() for source in self._sources)])
            top = unicycle.top_speed(settings["max_linear_mps"], settings["safety_clearance_cm"] / 100.0,
                                     unseen_s + trip.cover_s, settings["max_decel_mps2"])  # fmt: skip
            linear, angular = unicycle.command(odom.pose, target, top, settings["max_angular_rps"])
            # and turning while it drives, it stays within the corridor the obstacle check clears
            linear = unicycle.within_bulge(linear, angular, trip.cover_s, obstacles.SIDE_MARGIN_M)
            late_s = (self.get_clock().now().nanoseconds - now_ns) / 1e9
            late = late_s >= command_deadline.lasts_s(trip.cover_s)  # its check is too old to drive or turn on
            if code is None and late:
                code, why = ErrorCode.UNAVAILABLE, f"stopped: the replan took {late_s:.2f} s (its executor busy?)"
            elif code is None:
                cmd.linear.x, cmd.angular.z = linear, angular
                self._publish_plan(odom.pose, target)
            elif linear == 0.0 and not late:  # the target is to the side: a circle turns in place, touching nothing
                cmd.angular.z, why = angular, f"turning in place: {why}"
        if code is None:
            trip.blocked, why = None, trip.reasoning
        else:
            if trip.blocked is None or trip.blocked[0] != code:  # each reason counts its own time
                trip.blocked = (code, now)
            if now - trip.blocked[1] >= settings["blocked_timeout_s"]:
                trip.run.end(code, f"{why}; stopped for {settings['blocked_timeout_s']:g} s")
                return
        self._send(cmd, trip, now_ns)
        trip.run.goal_handle.publish_feedback(self._feedback(trip, cmd, why, odom, settings, now))

    def _feedback(self, trip: Trip, cmd: Twist, why: str, odom: Odom | None, settings: dict, now: float) -> Any:
        feedback = Navigate.Feedback(cmd=cmd, reasoning=why, distance_remaining=trip.distance,
                                     navigation_time=duration(now - trip.start),
                                     estimated_time_remaining=duration(trip.distance / settings["max_linear_mps"]))  # fmt: skip
        if odom is not None:
            feedback.current_pose.header.frame_id = self._odom_frame
            feedback.current_pose.header.stamp.sec, feedback.current_pose.header.stamp.nanosec = divmod(
                odom.stamp_ns, 1_000_000_000
            )
            position, orientation = feedback.current_pose.pose.position, feedback.current_pose.pose.orientation
            position.x, position.y = odom.pose.x, odom.pose.y
            orientation.z, orientation.w = math.sin(odom.pose.yaw / 2), math.cos(odom.pose.yaw / 2)
        return feedback

    def _check_reach(self, pose: Pose2D, target: tuple[float, float]) -> float:
        """The target's distance from the robot; OUT_OF_RANGE beyond `max_target_distance_m`."""
        distance = math.hypot(target[0] - pose.x, target[1] - pose.y)
        bound = self.get_parameter("max_target_distance_m").value
        bounds.at_most("the target's distance from the robot", distance, bound, "m")
        return distance

    def _stop_reason(self, odom_age: float, tf_problem: str, settings: dict[str, Any],
                     now_ns: int) -> tuple[ErrorCode | None, str, bool]:  # fmt: skip
        """Why the robot may not drive forward now: (the code if it lasts, the reason, whether it may still turn in
        place); (None, '', True) = it may drive. Without recent odometry it cannot know where it is, without every
        obstacle source what is ahead, without the transform where the target is; an obstacle ahead leaves turning
        unless a point is within the footprint."""
        timeout = settings["input_timeout_s"]
        ages = [(f"odometry on {self._odom_name}", odom_age)] + [(s.name, s.age(now_ns)) for s in self._sources]
        for what, age in ages:
            if age > timeout:
                return ErrorCode.UNAVAILABLE, f"stopped: no {what} in the last {timeout:g} s", False
        if tf_problem:
            return ErrorCode.TF_ERROR, tf_problem, False
        radius, clearance = settings["robot_radius_m"], settings["safety_clearance_cm"] / 100.0
        blocking = []  # (obstacle, source name) of every source that sees one: turning needs all of them clear
        for source in self._sources:
            try:
                obstacle = source.blocking(radius, clearance, self._odometry, settings["obstacle_memory_s"])
            except TransformUnavailable as exc:
                return ErrorCode.TF_ERROR, f"stopped: the {source.name} cannot be placed in {self._base}: {exc}", False
            if obstacle is not None:
                blocking.append((obstacle, source.name))
        if not blocking:
            return None, "", True
        obstacle, name = min(blocking, key=lambda seen: seen[0].gap_m)
        return ErrorCode.OBSTACLE, (
            f"safety stop: obstacle {obstacle.gap_m * 100:.0f} cm away "
            f"(< {settings['safety_clearance_cm']:g} cm), {obstacle.ahead_m * 100:.0f} cm ahead ({name})"
        ), not any(seen.touching for seen, _ in blocking)

    def _publish_plan(self, pose: Pose2D, target: tuple[float, float]) -> None:
        path = Path()
        path.header.frame_id = self._odom_frame
        path.header.stamp = self.get_clock().now().to_msg()
        for x, y in unicycle.straight_path(pose, target):
            waypoint = PoseStamped(header=path.header)
            waypoint.pose.position.x, waypoint.pose.position.y = x, y
            path.poses.append(waypoint)
        self._plan.publish(path)

    async def _reason(self, trip: Trip) -> None:
        """The language head's view of the way ahead, as JSON fields (``reasoning``): the feedback's reasoning."""
        p = trip.target.pose.position
        text = await self.language_head(trip.run, "navigation", reasoning.prompt(p.x, p.y, trip.instruction),
                                        reasoning.SCHEMA)  # fmt: skip
        if text is not None:
            trip.reasoning = reasoning.read(text)


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros navigation_node`."""
    return run(NavigationNode, partial(Executor, num_threads=3), NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
