"""`navigation_node`: the Navigate action on `/navigate`: drive to a target pose, stop for obstacles, explain why.

Coordinates: the target's frame must be `map` (the ``frame_id`` parameter; '' is taken as it), which camera_sim's
`/odom` uses too: the simulated room in metres, origin at its south-west corner, x east, y north. At
`replan_rate_hz` the node reads the newest odometry and camera frame, replans a straight line to the target
(nav_msgs/Path on `plan`) and sends a unicycle command (TwistStamped, or Twist, on `cmd_vel`,
``oxygen_ros.control.unicycle``). Safety stop: when the newest frame shows an obstacle in front of the robot closer
than `safety_clearance_cm` (gap between the bodies, from the detector), it sends a zero Twist and the feedback says
why; the obstacle in the simulator walks on, and the robot drives again once it is clear. The target's orientation
is not controlled: the goal is reached on position (the base ends facing the way it drove).

The language head (`/oxygen/infer`, task_type navigation) is asked about the scene every `reasoning_period_s`; its
answer is the feedback's reasoning. It never gates motion: a text model is too slow to steer at the replan rate.

Results: success within `goal_tolerance_m`; INVALID_ARGUMENT for a NaN/inf target or another frame (accepted,
then aborted); OUT_OF_RANGE for a target farther than `max_target_distance_m` from the robot (checked on the goal,
and on each replan for a goal that came before any odometry; non-finite odometry is ignored) or a hint over
``bounds.TEXT_CHARS``; UNAVAILABLE when `/oxygen/infer` is absent, or when no odometry or camera frame newer than
STALE_S came for `blocked_timeout_s` (the robot stands still meanwhile); OBSTACLE after `blocked_timeout_s` stopped
for an obstacle (each reason counts its own time: a stop for an obstacle that turns into one for stale inputs starts
over); DEADLINE_EXCEEDED after `max_duration_s`; CANCELLED when cancelled or preempted by a newer goal. Every ending
sends a zero Twist. The numbers other than the `oxygen/infer` waits may be changed while the node runs (`ros2 param set`,
within their ranges): each replan reads them; the replan and reasoning rates apply from the next goal. The rest is
read once and read-only. Names are relative (`navigate`, `plan`, `odom`, `cmd_vel`), so a namespace moves them.
"""

import math
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from geometry_msgs.msg import PoseStamped, Twist
from nav_msgs.msg import Odometry, Path
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from oxygen_ros.nodes.executor import Executor
from rclpy.timer import Timer

from oxygen_ros.action import Navigate
from oxygen_ros.control import unicycle
from oxygen_ros.control.unicycle import Pose2D
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes import bounds, latest_frame, velocity
from oxygen_ros.nodes.declare import Ranges, Table, current, keep_positive
from oxygen_ros.nodes.goal_run import GoalRun
from oxygen_ros.nodes.spin import run
from oxygen_ros.nodes.task_action import TaskActionNode

NODE_NAME = "navigation_node"
STALE_S = 1.0  # odometry or camera frames older than this are no basis for driving: the robot stops
PARAMETERS: Table = {
    "replan_rate_hz": (5.0, "how often the path and the velocity command are recomputed, per second"),
    "safety_clearance_cm": (25.0, "stop when an obstacle ahead is closer than this (gap between the bodies), cm"),
    "goal_tolerance_m": (0.1, "the goal is reached within this distance, metres"),
    "max_target_distance_m": (
        bounds.TARGET_DISTANCE_M,
        "targets farther from the robot are aborted OUT_OF_RANGE, metres",
    ),
    "max_linear_mps": (0.3, "top forward speed, m/s"),
    "max_angular_rps": (1.0, "top turn rate, rad/s"),
    "blocked_timeout_s": (10.0, "abort OBSTACLE after being stopped this long, seconds"),
    "max_duration_s": (120.0, "abort DEADLINE_EXCEEDED after this long, seconds"),
    "reasoning_period_s": (5.0, "how often the language head is asked about the way ahead, seconds"),
    "max_new_tokens": (24, "reasoning token budget"),
    "infer_timeout_s": (60.0, "longest wait for /oxygen/infer to answer, seconds"),
    "service_wait_s": (1.0, "how long to wait for /oxygen/infer to appear before aborting UNAVAILABLE, seconds"),
    "frame_id": ("map", "the frame of targets, odometry and plan"),
    "odom_topic": ("odom", "nav_msgs/Odometry input: the robot's pose in frame_id (others are ignored)"),
    "cmd_vel_topic": ("cmd_vel", "velocity command output (geometry_msgs/TwistStamped, or Twist: cmd_vel_stamped)"),
    "cmd_vel_stamped": (True, "send TwistStamped (Jazzy's diff_drive_controller, nav2); false = Twist (older stacks)"),
    **latest_frame.PARAMETERS,
}
# Read once, at start: refused when set later (read_only). The others are read on every replan.
READ_ONCE = ["service_wait_s", "infer_timeout_s", "frame_id", "odom_topic", "cmd_vel_topic", "cmd_vel_stamped",
             *latest_frame.PARAMETERS]  # fmt: skip
RANGES: Ranges = {
    "replan_rate_hz": (0.0, 100.0),
    "safety_clearance_cm": (0.0, 1000.0),
    "goal_tolerance_m": (0.0, 10.0),
    "max_target_distance_m": (0.0, 1e4),
    "max_linear_mps": (0.0, 10.0),
    "max_angular_rps": (0.0, 20.0),
    "blocked_timeout_s": (0.0, 3600.0),
    "max_duration_s": (0.0, bounds.GOAL_DURATION_S),
    "reasoning_period_s": (0.0, 3600.0),
    "max_new_tokens": (1, 4096),
    "infer_timeout_s": (0.0, 3600.0),
    "service_wait_s": (0.0, 600.0),
}


@dataclass
class Trip:
    """A running goal's state, touched by its replan tick (one at a time) and its reasoning coroutine."""

    run: GoalRun
    target: tuple[float, float]
    instruction: str
    start: float
    distance: float = math.nan
    reasoning: str = ""
    blocked: tuple[ErrorCode, float] | None = None  # why the robot stands still, and since when


def yaw_of(odom: Odometry) -> float:
    q = odom.pose.pose.orientation
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


class NavigationNode(TaskActionNode[Trip]):
    """Raises ValueError naming a bad parameter."""

    def __init__(self, **kwargs: Any) -> None:
        numbers = list(RANGES)
        super().__init__(NODE_NAME, Navigate, "navigate", PARAMETERS, numbers, RANGES, READ_ONCE, **kwargs)
        keep_positive(self, *numbers)
        self._replans = MutuallyExclusiveCallbackGroup()  # one replan at a time, never behind other callbacks
        self._lock = threading.Lock()
        self._pose: tuple[Pose2D, float] | None = None  # and when it arrived (monotonic seconds)
        odom_topic = self.settings["odom_topic"]
        self._odom_name = self.resolve_topic_name(odom_topic)  # the full name, as messages quote it
        self.create_subscription(Odometry, odom_topic, self._on_odom, 10, callback_group=self.group)
        self._stamped = self.settings["cmd_vel_stamped"]
        self._cmd_vel = self.create_publisher(velocity.command_type(self._stamped), self.settings["cmd_vel_topic"], 10)
        self._plan = self.create_publisher(Path, "plan", 1)

    def _on_odom(self, msg: Odometry) -> None:
        frame_id = self.settings["frame_id"]
        if msg.header.frame_id not in ("", frame_id):  # a pose in another frame would be compared with map targets
            self.get_logger().warning(f"ignoring odometry in frame {msg.header.frame_id!r}: targets are in "
                                      f"{frame_id!r}", throttle_duration_sec=5.0)  # fmt: skip
            return
        pose = Pose2D(msg.pose.pose.position.x, msg.pose.pose.position.y, yaw_of(msg))
        if not all(math.isfinite(v) for v in (pose.x, pose.y, pose.yaw)):  # no basis for driving: it goes stale
            self.get_logger().warning(f"ignoring a non-finite pose on {self._odom_name}: {pose}",
                                      throttle_duration_sec=5.0)  # fmt: skip
            return
        with self._lock:
            self._pose = pose, time.monotonic()

    def check(self, goal: Navigate.Goal) -> None:
        bounds.text("instruction", goal.instruction, bounds.TEXT_CHARS)
        target = goal.target
        p, q = target.pose.position, target.pose.orientation
        axes = {f"position.{a}": getattr(p, a) for a in "xyz"} | {f"orientation.{a}": getattr(q, a) for a in "xyzw"}
        for name, value in axes.items():
            bounds.finite(f"target pose {name}", value)
        frame_id = self.settings["frame_id"]
        bounds.text("target frame_id", target.header.frame_id, bounds.ID_CHARS)
        if target.header.frame_id not in ("", frame_id):
            raise EngineError(
                ErrorCode.INVALID_ARGUMENT, f"the target must be in frame {frame_id!r}, got {target.header.frame_id!r}"
            )
        with self._lock:
            pose, _ = self._pose or (None, None)
        if pose is not None:
            self._check_reach(pose, (p.x, p.y))

    async def prepare(self, run: GoalRun, goal: Navigate.Goal) -> Trip | None:
        if not await self.infer.available():
            run.end(ErrorCode.UNAVAILABLE, f"{self.infer.service} is not available (is the inference node running?)")
            return None
        target = (goal.target.pose.position.x, goal.target.pose.position.y)
        self.get_logger().info(f"{run.task_id}: to ({target[0]:.2f}, {target[1]:.2f}) {goal.instruction!r}")
        return Trip(run, target, goal.instruction.strip(), time.monotonic())

    def start(self, trip: Trip) -> list[Timer]:
        settings = current(self, PARAMETERS)
        self.executor.create_task(self._reason, trip)
        return [
            self.create_timer(
                1.0 / settings["replan_rate_hz"], partial(self._tick, trip), callback_group=self._replans
            ),
            self.create_timer(settings["reasoning_period_s"], partial(self._reason, trip), callback_group=self.group),
        ]

    def finish(self, trip: Trip, result: Navigate.Result) -> None:
        result.distance_remaining = trip.distance  # NaN when no odometry ever arrived: unknown, not "arrived"

    def stopped(self) -> None:
        self._send(Twist())

    def _send(self, twist: Twist) -> None:
        self._cmd_vel.publish(velocity.command(twist, self._stamped, self.get_clock().now().to_msg()))

    def _tick(self, trip: Trip) -> None:
        """One replan: end the goal when due, else stop (obstacle ahead, stale inputs) or drive a fresh straight
        path. Stopped longer than `blocked_timeout_s` ends the goal: OBSTACLE, or UNAVAILABLE for missing inputs."""
        if trip.run.end_if_cancelled():
            return
        settings, now = current(self, PARAMETERS), time.monotonic()
        with self._lock:
            pose, received = self._pose or (None, -math.inf)
        if pose is not None:
            try:
                trip.distance = self._check_reach(pose, trip.target)
            except EngineError as exc:
                trip.run.end(exc.code, exc.message)
                return
            if trip.distance <= settings["goal_tolerance_m"]:
                trip.run.end(None, f"reached the target, {trip.distance:.2f} m away")
                return
        if now - trip.start > settings["max_duration_s"]:
            trip.run.end(ErrorCode.DEADLINE_EXCEEDED, f"not there after {settings['max_duration_s']:g} s")
            return
        code, why = self._stop_reason(now - received, settings)
        cmd = Twist()
        if code is None:
            trip.blocked, why = None, trip.reasoning
            cmd.linear.x, cmd.angular.z = unicycle.command(
                pose, trip.target, settings["max_linear_mps"], settings["max_angular_rps"]
            )
            self._publish_plan(pose, trip.target)
        else:
            if trip.blocked is None or trip.blocked[0] != code:  # each reason counts its own time
                trip.blocked = (code, now)
            if now - trip.blocked[1] >= settings["blocked_timeout_s"]:
                trip.run.end(code, f"{why}; stopped for {settings['blocked_timeout_s']:g} s")
                return
        self._send(cmd)
        feedback = Navigate.Feedback(cmd=cmd, reasoning=why, distance_remaining=trip.distance)
        trip.run.goal_handle.publish_feedback(feedback)

    def _check_reach(self, pose: Pose2D, target: tuple[float, float]) -> float:
        """The target's distance from the robot; OUT_OF_RANGE beyond `max_target_distance_m`."""
        distance = math.hypot(target[0] - pose.x, target[1] - pose.y)
        bound = self.get_parameter("max_target_distance_m").value
        bounds.at_most("the target's distance from the robot", distance, bound, "m")
        return distance

    def _stop_reason(self, odom_age: float, settings: dict[str, Any]) -> tuple[ErrorCode | None, str]:
        """Why the robot must stand still now, as (the code if it lasts, the reason); (None, '') = it may drive.
        Without recent odometry and camera frames it cannot know where it is or what is ahead."""
        for what, age in ((f"odometry on {self._odom_name}", odom_age), ("camera frame", self.frame.age())):
            if age > STALE_S:
                return ErrorCode.UNAVAILABLE, f"stopped: no {what} in the last {STALE_S:g} s"
        detections = self.frame.detections()
        obstacle = unicycle.blocking(detections.obstacles if detections else [], settings["safety_clearance_cm"])
        if obstacle is None:
            return None, ""
        return ErrorCode.OBSTACLE, (
            f"safety stop: obstacle {obstacle.clearance_cm:.0f} cm away "
            f"(< {settings['safety_clearance_cm']:g} cm), {obstacle.ahead_cm:.0f} cm ahead"
        )

    def _publish_plan(self, pose: Pose2D, target: tuple[float, float]) -> None:
        path = Path()
        path.header.frame_id = self.settings["frame_id"]
        path.header.stamp = self.get_clock().now().to_msg()
        for x, y in unicycle.straight_path(pose, target):
            waypoint = PoseStamped(header=path.header)
            waypoint.pose.position.x, waypoint.pose.position.y = x, y
            path.poses.append(waypoint)
        self._plan.publish(path)

    async def _reason(self, trip: Trip) -> None:
        """The language head's view of the way ahead; its answer is the feedback's reasoning."""
        hint = f" Hint: {trip.instruction}." if trip.instruction else ""
        prompt = (
            f"The robot drives to x {trip.target[0]:.1f} m, y {trip.target[1]:.1f} m.{hint} Is the path ahead clear?"
        )
        text = await self.language_head(trip.run, "navigation", prompt)
        if text is not None:
            trip.reasoning = text


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros navigation_node`."""
    return run(NavigationNode, partial(Executor, num_threads=3), NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
