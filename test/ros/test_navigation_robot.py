"""`navigation_node` as on a robot, through real rclpy nodes and no simulator: a stand-in base (driven by cmd_vel,
odometry in `odom`, a camera, a laser scanner mounted backwards on a `laser` frame) and a map -> odom transform the
test publishes on /tf; the language head is the echo server. A target in `map` is reached through that transform (odom
is rotated and shifted against map), a missing transform ends the goal TF_ERROR within transform_wait_s, an obstacle
on the scan stops the base and a scan that stops coming stops it too (UNAVAILABLE once it lasts), as does a replan
that comes late; without nav2 a goal
is refused FAILED_PRECONDITION, with only zero velocities sent, unless the built-in driver is allowed and a live
obstacle source configured; with a stand-in nav2 NavigateToPose server (also one that appears while a goal waits
for it) the goal is handed to it: its feedback (pose, elapsed, remaining) and result are relayed, a cancel reaches
it, its failures come back with our codes and its malformed feedback is dropped, and a goal it accepts only after we
gave up on it is cancelled."""

import math
import re
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from echo_servers import EchoServers
from inference_client import Capture
from geometry_msgs.msg import PoseStamped, TransformStamped, Twist, TwistStamped
from nav2_msgs.action import NavigateToPose
from nav_msgs.msg import Odometry
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_harness import call_service, make_context, send_goal, spin_nodes, wait_until
from sensor_msgs.msg import CameraInfo, Image, LaserScan
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from oxygen_ros.action import Navigate
from oxygen_ros.control.obstacles import Blocking
from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes.infer_client import inference_at
from oxygen_ros.nodes.nav2_handoff import CANCEL_TRIES
from oxygen_ros.nodes.navigation_node import NavigationNode
from oxygen_ros.nodes.tf import topics
from oxygen_ros.nodes.tf.rigid import Rigid, planar

RATE_HZ = 20.0
MAP_TO_ODOM = planar(2.0, -1.0, math.pi / 2)  # where odometry started on the map, and facing north
TARGET_IN_MAP = (1.5, 0.0)  # 1 m "forward" and 0.5 m "right" of odom's origin: (1.0, 0.5) in odom
LASER_IN_BASE = planar(0.1, 0.0, math.pi, z=0.2)  # mounted 10 cm ahead of the centre, looking backwards
SCAN_RAYS = 360
# a depth camera 30 cm up looking ahead (REP 103 optical frame: z forward, x right, y down); 64 x 48 pixels
DEPTH_IN_BASE = Rigid((0.15, 0.0, 0.3), (-0.5, 0.5, -0.5, 0.5))
DEPTH_K = (16.0, 16.0, 31.5, 23.5)  # fx, fy, cx, cy: wide, so it sees the floor from 35 cm ahead of base_link


class Base(Node):
    """A unicycle base: integrates TwistStamped cmd_vel, publishes odometry in odom, a camera frame and (``scanning``)
    a laser scan each tick, seeing the ``obstacles`` (points in base_link), and (``broadcasting``) map -> odom on
    /tf, stamped like the odometry; base_link -> laser and -> depth_optical on /tf_static."""

    def __init__(self, context) -> None:
        super().__init__("stand_in_base", context=context)
        self.x = self.y = self.yaw = 0.0
        self.broadcasting = self.scanning = self.odometry = True
        self.obstacles: list[tuple[float, float]] = []  # (x, y) in base_link, seen by the laser
        self.wall_ahead_m: float | None = None  # what the depth camera sees besides the floor
        self.too_close = False  # the depth camera's upper half too close to measure (REP 117's -inf)
        self._command = (0.0, 0.0)
        self._odom = self.create_publisher(Odometry, "/odom", 10)
        self._camera = self.create_publisher(Image, "/camera/image_raw", qos_profile_sensor_data)
        self._scan = self.create_publisher(LaserScan, "/scan", qos_profile_sensor_data)
        self._depth = self.create_publisher(Image, "/depth/image_raw", qos_profile_sensor_data)
        self._depth_info = self.create_publisher(CameraInfo, "/depth/camera_info", qos_profile_sensor_data)
        self._tf = topics.TransformBroadcaster(self)
        mounts = [TransformStamped(child_frame_id=child, transform=rigid.to_msg())
                  for child, rigid in (("laser", LASER_IN_BASE), ("depth_optical", DEPTH_IN_BASE))]  # fmt: skip
        for mount in mounts:
            mount.header.frame_id = "base_link"
        self._static_tf = topics.StaticTransformBroadcaster(self)
        self._static_tf.sendTransform(mounts)
        self.create_subscription(TwistStamped, "/cmd_vel", self._on_cmd_vel, 10)
        self.create_timer(1.0 / RATE_HZ, self._tick)

    def _on_cmd_vel(self, msg: TwistStamped) -> None:
        self._command = (msg.twist.linear.x, msg.twist.angular.z)

    def _tick(self) -> None:
        v, w = self._command
        self.yaw += w / RATE_HZ
        self.x += v / RATE_HZ * math.cos(self.yaw)
        self.y += v / RATE_HZ * math.sin(self.yaw)
        header = Header(stamp=self.get_clock().now().to_msg(), frame_id="odom")
        odom = Odometry(header=header, child_frame_id="base_link")
        odom.pose.pose.position.x, odom.pose.pose.position.y = self.x, self.y
        odom.pose.pose.orientation.z, odom.pose.pose.orientation.w = math.sin(self.yaw / 2), math.cos(self.yaw / 2)
        if self.odometry:
            self._odom.publish(odom)
        camera = Header(stamp=header.stamp, frame_id="camera_optical_frame")
        self._camera.publish(rgb_to_image(np.zeros((48, 64, 3), np.uint8), camera))
        if self.broadcasting:
            transform = TransformStamped(child_frame_id="odom", transform=MAP_TO_ODOM.to_msg())
            transform.header.stamp, transform.header.frame_id = header.stamp, "map"
            self._tf.sendTransform(transform)
        if self.scanning:
            self._scan.publish(self._laser_scan(Header(stamp=header.stamp, frame_id="laser")))
        depth = Header(stamp=header.stamp, frame_id="depth_optical")
        fx, fy, cx, cy = DEPTH_K
        self._depth_info.publish(CameraInfo(header=depth, width=64, height=48, k=[fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]))
        self._depth.publish(self._depth_image(depth))

    def _depth_image(self, header: Header) -> Image:
        """32FC1: the floor 30 cm below the camera (rows under the horizon), NaN above it (no return), and a wall
        ``wall_ahead_m`` ahead of base_link filling the view where it is nearer than the floor; with ``too_close``
        the upper half -inf (REP 117: something nearer than the camera measures)."""
        fx, fy, cx, cy = DEPTH_K
        rows = np.arange(48, dtype=np.float32)[:, None] - cy
        with np.errstate(divide="ignore"):
            depth = np.where(rows > 0, DEPTH_IN_BASE.translation[2] * fy / rows, np.nan) * np.ones((1, 64), np.float32)
        if self.wall_ahead_m is not None:
            depth = np.fmin(depth, self.wall_ahead_m - DEPTH_IN_BASE.translation[0])
        if self.too_close:
            depth[: depth.shape[0] // 2] = -np.inf
        data = depth.astype("<f4").tobytes()
        return Image(header=header, height=48, width=64, encoding="32FC1", step=64 * 4, data=data)

    def _laser_scan(self, header: Header) -> LaserScan:
        """Nothing in range but the obstacles, each on the ray nearest it (the laser looks backwards: ahead of
        base_link is its angle pi, ray 0)."""
        ranges = [math.inf] * SCAN_RAYS
        into_laser = LASER_IN_BASE.inverse()
        for x, y in self.obstacles:
            lx, ly, _ = into_laser.apply((x, y, LASER_IN_BASE.translation[2]))
            ray = round((math.atan2(ly, lx) + math.pi) / (2 * math.pi / SCAN_RAYS)) % SCAN_RAYS
            ranges[ray] = min(ranges[ray], math.hypot(lx, ly))
        return LaserScan(header=header, angle_min=-math.pi, angle_max=math.pi * (1 - 2 / SCAN_RAYS),
                         angle_increment=2 * math.pi / SCAN_RAYS, range_min=0.05, range_max=10.0, ranges=ranges)

class StandInNav2(Node):
    """nav2's bt_navigator as seen from outside: a NavigateToPose server whose behaviour a test sets."""

    def __init__(self, context, action: str = "/navigate_to_pose") -> None:
        super().__init__(f"stand_in_bt_navigator{action.replace('/', '_')}", context=context)
        self.goals: list[PoseStamped] = []
        self.cancelled = False
        self.ending = "succeed"  # succeed | tf_error | wait (until cancelled)
        self.bad_feedback = False
        self.answer_after_s = 0.0  # how long it takes to accept a goal
        self.cancel_answer = CancelResponse.ACCEPT
        self.cancel_after_s = 0.0  # how long it takes to answer a cancel
        self.cancel_requests = 0
        self.pose_x = 0.0  # where its feedback says the robot is, in map, at the start (it moves 0.2 m a step)
        self._server = ActionServer(self, NavigateToPose, action, self._execute, goal_callback=self._accept,
                                    cancel_callback=self._cancel, callback_group=ReentrantCallbackGroup())  # fmt: skip

    def _accept(self, _goal) -> GoalResponse:
        time.sleep(self.answer_after_s)
        return GoalResponse.ACCEPT

    def _cancel(self, _goal) -> CancelResponse:
        self.cancel_requests += 1
        time.sleep(self.cancel_after_s)
        return self.cancel_answer

    def destroy_node(self) -> None:
        self._server.destroy()
        super().destroy_node()

    def _execute(self, goal_handle) -> NavigateToPose.Result:
        self.goals.append(goal_handle.request.pose)
        for step in range(200 if self.ending == "wait" else 5):
            if goal_handle.is_cancel_requested:
                self.cancelled = True
                goal_handle.canceled()
                return NavigateToPose.Result()
            feedback = NavigateToPose.Feedback(distance_remaining=1.0 - 0.2 * step, number_of_recoveries=0)
            feedback.current_pose.header.frame_id = "map"
            feedback.current_pose.pose.position.x = math.nan if self.bad_feedback else self.pose_x + 0.2 * step
            feedback.current_pose.pose.orientation.w = 1.0
            feedback.navigation_time.sec, feedback.estimated_time_remaining.sec = step, 5 - step
            goal_handle.publish_feedback(feedback)
            time.sleep(0.05)
        if self.ending == "tf_error":
            goal_handle.abort()
            return NavigateToPose.Result(error_code=NavigateToPose.Result.TF_ERROR, error_msg="no map -> odom")
        goal_handle.succeed()
        return NavigateToPose.Result()


# The robot's own wiring; the built-in driver allowed, with the scan as its obstacle source.
SENSORS = {"odom_topic": "/odom", "camera_topic": "/camera/image_raw", "nav2_action": "/navigate_to_pose",
           "nav2_wait_s": 1.0, "transform_wait_s": 1.0, "reasoning_period_s": 0.5}
WIRING = SENSORS | {"cmd_vel_topic": "/cmd_vel", "allow_builtin_driver": True, "scan_topic": "/scan"}
NODES = {"never": WIRING | {"nav2": "never"}, "auto": WIRING | {"nav2": "auto"}, "always": WIRING | {"nav2": "always"},
         "world": WIRING | {"nav2": "never", "map_frame": "world"},  # no one publishes world -> odom
         # slow, so that the robot's motion while an image waits on a busy machine moves the wall little
         # a wall gone leaves no return above the horizon (nothing in range): remembered for obstacle_memory_s
         "depth": WIRING | {"nav2": "never", "scan_topic": "", "depth_topic": "/depth/image_raw",
                            "max_linear_mps": 0.1, "obstacle_memory_s": 1.0},
         "answer_wait": WIRING | {"nav2": "always", "service_wait_s": 3.0},  # time for a late answer either side of 3 s
         "fallback": WIRING | {"nav2": "auto", "nav2_action": "/nobody/navigate_to_pose"},  # its nav2_wait_s is over
         # refused: each commands its own cmd_vel (/<name>/cmd_vel), which the test watches
         "defaults": SENSORS | {"nav2": "auto"},  # a robot's config/oxygen.yaml: the built-in driver is off
         "no_source": SENSORS | {"allow_builtin_driver": True, "scan_topic": ""},
         "silent_scan": SENSORS | {"allow_builtin_driver": True, "scan_topic": "/nobody/scan"}}  # fmt: skip
REFUSED = {
    "defaults": "no nav2 server on /navigate_to_pose (nav2_wait_s 1), and the built-in driver is off (allow_builtin_driver",
    "no_source": "needs a live obstacle source and none is configured: set scan_topic",
    "silent_scan": "needs every obstacle source live: no LaserScan on /nobody/scan in 0.5 s",
}


@pytest.fixture(scope="module")
def robot(ros_domain_id):
    """One base, the echo language head and navigation nodes in their own namespaces (each its own `navigate`)
    wired to the one base; the nav2 stand-in joins later (``with_nav2``)."""
    context = make_context(ros_domain_id)
    base, echo, client = Base(context), EchoServers(context), Node("navigation_robot_client", context=context)
    nodes = {name: NavigationNode(context=context, namespace=name, cli_args=inference_at("/"),
                                  parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
             for name, values in NODES.items()}  # fmt: skip
    commands = {name: Capture(client, TwistStamped, f"/{name}/cmd_vel", 100) for name in REFUSED}
    graph = {"context": context, "client": client, "base": base, "nodes": nodes, "nav2": None, "commands": commands}
    try:
        with spin_nodes(context, base, echo, client, *nodes.values(), num_threads=6) as executor:
            graph["executor"] = executor
            yield graph
    finally:
        if graph["nav2"] is not None:
            graph["nav2"].destroy_node()
        context.try_shutdown()


@pytest.fixture
def with_nav2(robot):
    """The nav2 stand-in (made on first use: its server exists, for discovery, from then on), discovered by the
    nodes that may hand goals to it."""
    if robot["nav2"] is None:
        robot["nav2"] = StandInNav2(robot["context"])
        robot["executor"].add_node(robot["nav2"])
    nav2 = robot["nav2"]
    nav2.ending, nav2.bad_feedback, nav2.cancelled, nav2.answer_after_s = "succeed", False, False, 0.0
    nav2.cancel_requests, nav2.pose_x = 0, 0.0
    for name in ("auto", "always", "answer_wait"):
        wait_until(robot["nodes"][name]._nav2.client.server_is_ready, 10.0, f"{name} sees nav2")
    return nav2


def navigate(robot, name: str, x: float, y: float, frame_id: str = "map"):
    target = PoseStamped()
    target.header.frame_id = frame_id
    target.pose.position.x, target.pose.position.y = x, y
    target.pose.orientation.w = 1.0
    return send_goal(robot["client"], Navigate, f"/{name}/navigate", Navigate.Goal(target=target))


def test_reaches_a_map_target_with_odometry_in_odom_through_tf(robot):
    goal = navigate(robot, "never", *TARGET_IN_MAP)
    out = goal.result(timeout=30.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    base = robot["base"]
    assert math.dist((base.x, base.y), (1.0, 0.5)) <= 0.12  # in odom: the transform was applied, not ignored
    x, y, _ = MAP_TO_ODOM.apply((base.x, base.y, 0.0))
    assert math.dist((x, y), TARGET_IN_MAP) <= 0.12, (x, y)
    last = goal.feedback[-1]
    assert last.current_pose.header.frame_id == "odom" and 0 < last.distance_remaining < 0.5
    assert 0 < last.navigation_time.sec + last.navigation_time.nanosec * 1e-9 < 30.0


@pytest.mark.parametrize("name", list(REFUSED))
def test_without_nav2_it_never_drives_blind(robot, name):
    """The issue's robot: no nav2, no (live) obstacle source. Refused at once, naming what is missing, and the base
    told to stand still: only zero velocities, never a move."""
    out = navigate(robot, name, *TARGET_IN_MAP).result(timeout=15.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "FAILED_PRECONDITION" and REFUSED[name] in out.result.message, out.result.message
    sent = robot["commands"][name]
    sent.wait_for(lambda _: True, 5.0, f"a velocity command on /{name}/cmd_vel")
    time.sleep(0.5)
    assert all(msg.twist == Twist() for msg in sent.messages), [msg.twist for msg in sent.messages]


def test_an_obstacle_on_the_scan_stops_the_base_until_the_way_is_clear(robot):
    base = robot["base"]
    goal = navigate(robot, "never", base.x + 2.0, base.y, frame_id="odom")  # far enough to be on the way a while
    wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving")
    base.obstacles = [(0.5, 0.0), (0.3, 0.3)]  # 30 cm ahead of the 20 cm footprint, and a wall beside the corridor
    time.sleep(0.6)
    assert goal.feedback[-1].cmd.linear.x > 0, goal.feedback[-1].reasoning
    base.obstacles = [(0.35, 0.0)]  # 15 cm ahead of it
    try:
        # 15 cm from the footprint when scanned; less by the robot's own motion since the scan (15 mm a tick of the
        # base at 0.3 m/s: a tick or two on a busy machine)
        assert_safety_stop(goal, "LaserScan on /scan", (12, 15))
        assert_stands_still(base)
    finally:
        base.obstacles = []
    out = goal.result(timeout=30.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    stops = [f for f in goal.feedback if f.reasoning.startswith("safety stop")]
    assert stops and all(f.cmd == Twist() for f in stops)


def test_a_depth_camera_stops_the_base_for_a_wall_and_not_for_the_floor(robot):
    base = robot["base"]
    goal = navigate(robot, "depth", base.x + 2.0, base.y, frame_id="odom")
    wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving over the floor it sees")
    base.wall_ahead_m = 0.4
    try:
        # 20 cm from the footprint when seen; less by the robot's own motion since the image (a cm or two at 0.1 m/s;
        # up to 10 on a machine so busy that the image waited a second)
        assert_safety_stop(goal, "depth image on /depth/image_raw", (10, 20))
    finally:
        base.wall_ahead_m = None
        goal.cancel()
    assert goal.result().status == GoalStatus.STATUS_CANCELED


def test_clear_obstacle_memory_lets_a_base_held_by_a_remembered_wall_drive_on(robot):
    """A wall seen, then gone where the depth camera sees nothing (no return above the horizon) stays in the memory
    and holds the base; `clear_obstacle_memory` (nav2's costmap clearing) forgets it and the base drives on."""
    base, node = robot["base"], robot["nodes"]["depth"]
    goal = navigate(robot, "depth", base.x + 2.0, base.y, frame_id="odom")
    try:  # (a wall an earlier test showed is forgotten after the node's 1 s: then the memory is made long)
        wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving over the floor")
        node.set_parameters([Parameter("obstacle_memory_s", value=60.0)])
        base.wall_ahead_m = 0.4
        wait_until(lambda: goal.feedback[-1].reasoning.startswith("safety stop"), 5.0, "a safety stop")
        base.wall_ahead_m = None
        time.sleep(1.5)  # images without the wall: none of their rays reaches where it was
        assert goal.feedback[-1].reasoning.startswith("safety stop") and goal.feedback[-1].cmd == Twist()
        answer = call_service(robot["client"], Trigger, "/depth/clear_obstacle_memory", Trigger.Request())
        assert answer.success and re.search(r"forgot [1-9]\d* points of the depth image", answer.message), answer
        wait_until(lambda: goal.feedback[-1].cmd.linear.x > 0, 5.0, "driving again")
    finally:
        base.wall_ahead_m = None
        node.set_parameters([Parameter("obstacle_memory_s", value=1.0)])
        goal.cancel()
    assert goal.result().status == GoalStatus.STATUS_CANCELED


def test_a_depth_camera_too_close_to_measure_stops_the_base(robot):
    """The upper half of the depth image -inf (REP 117: something nearer than the camera can measure, a hand over the
    lens, a box against it) while its lower half still sees the floor: no clear way; the image is not used, and the
    source, stale, stops the base."""
    base = robot["base"]
    goal = navigate(robot, "depth", base.x + 2.0, base.y, frame_id="odom")
    wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving over the floor it sees")
    base.too_close = True
    try:
        stopped = "stopped: no depth image on /depth/image_raw in the last"
        wait_until(lambda: goal.feedback[-1].reasoning.startswith(stopped), 5.0, "a stop naming the camera")
        assert goal.feedback[-1].cmd == Twist()
    finally:
        base.too_close = False
        goal.cancel()
    assert goal.result().status == GoalStatus.STATUS_CANCELED


def assert_safety_stop(goal, source: str, gap_cm: tuple[int, int]) -> None:
    """The goal's feedback comes to a safety stop naming ``source`` with a zero command: the obstacle within
    ``gap_cm`` of the footprint, and ahead by that and the footprint's 20 cm radius (the robot's own motion since
    the reading shortens both alike)."""
    wait_until(lambda: goal.feedback[-1].reasoning.startswith("safety stop"), 5.0, "a safety stop")
    stop = goal.feedback[-1]
    assert stop.cmd == Twist() and source in stop.reasoning, stop.reasoning
    gap, ahead = map(int, re.search(r"obstacle (\d+) cm away .* (\d+) cm ahead", stop.reasoning).groups())
    assert abs(ahead - gap - 20) <= 1 and gap_cm[0] <= gap <= gap_cm[1], stop.reasoning


def assert_stands_still(base: Base, for_s: float = 0.5) -> None:
    """The base does not move: every command it got over ``for_s`` was zero (not merely the feedback's)."""
    wait_until(lambda: base._command == (0.0, 0.0), 5.0, "a zero command at the base")  # the stop reached it
    time.sleep(0.1)  # and the base's last integration step of the command before it is done
    here = (base.x, base.y, base.yaw)
    time.sleep(for_s)
    assert math.dist(here[:2], (base.x, base.y)) < 1e-3 and abs(here[2] - base.yaw) < 1e-3, (here, base.x, base.y)


def test_a_scan_that_stops_coming_stops_the_base_then_unavailable(robot):
    robot["nodes"]["never"].set_parameters([Parameter("blocked_timeout_s", value=1.0)])
    try:
        goal = navigate(robot, "never", robot["base"].x - 2.0, robot["base"].y, frame_id="odom")
        wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving")
        robot["base"].scanning = False
        wait_until(lambda: goal.feedback[-1].reasoning.startswith("stopped:"), 5.0, "a stop")
        assert_stands_still(robot["base"])
        out = goal.result(timeout=15.0)
    finally:
        robot["base"].scanning = True
        robot["nodes"]["never"].set_parameters([Parameter("blocked_timeout_s", value=10.0)])
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "UNAVAILABLE" and "no LaserScan on /scan" in out.result.message, out.result.message
    stops = [f for f in goal.feedback if f.reasoning.startswith("stopped:")]
    assert stops and all(f.cmd == Twist() for f in stops)


def test_a_target_reached_only_by_odometry_that_stopped_is_no_success(robot):
    """Odometry stops with the robot on the target: the last pose proves nothing, so the goal stands, then ends
    UNAVAILABLE, never SUCCEEDED."""
    base, node = robot["base"], robot["nodes"]["never"]
    wait_until(lambda: node._odometry.latest() is not None, 10.0, "the node's first odometry")
    node.set_parameters([Parameter("blocked_timeout_s", value=1.0)])
    base.odometry = False
    try:
        time.sleep(0.7)  # past input_timeout_s (0.5 s)
        out = navigate(robot, "never", base.x, base.y, frame_id="odom").result(timeout=15.0)
    finally:
        base.odometry = True
        node.set_parameters([Parameter("blocked_timeout_s", value=10.0)])
    assert out.status == GoalStatus.STATUS_ABORTED, out.result.message
    assert out.result.error_code == "UNAVAILABLE" and "no odometry on /odom" in out.result.message, out.result.message


def test_auto_waits_for_a_nav2_that_comes_up_late(robot):
    """A node that just started (its robot's nav2 still coming up) waits nav2_wait_s for it; the goal goes to nav2."""
    late = NavigationNode(context=robot["context"], namespace="late", cli_args=inference_at("/"), parameter_overrides=[
        Parameter(k, value=v) for k, v in (SENSORS | {"nav2_action": "/late/navigate_to_pose", "nav2_wait_s": 10.0,
                                                     "service_wait_s": 5.0}).items()])  # fmt: skip
    robot["executor"].add_node(late)
    nav2 = StandInNav2(robot["context"], "/late/navigate_to_pose")
    try:
        goal = navigate(robot, "late", *TARGET_IN_MAP)
        time.sleep(1.5)  # nav2 still coming up: the goal waits for it
        assert goal.feedback == []
        robot["executor"].add_node(nav2)
        out = goal.result(timeout=20.0)
    finally:
        for node in (nav2, late):
            robot["executor"].remove_node(node)
            node.destroy_node()
    assert out.status == GoalStatus.STATUS_SUCCEEDED and out.result.message == "nav2 reached the target"
    assert len(nav2.goals) == 1


def test_auto_without_nav2_falls_back_to_the_built_in_driver(robot):
    goal = navigate(robot, "fallback", robot["base"].x + 0.5, robot["base"].y, frame_id="odom")
    out = goal.result(timeout=20.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED and out.result.message.startswith("reached the target")
    assert any(f.cmd.linear.x > 0 for f in goal.feedback)


def test_a_newer_goal_preempts_at_once_and_the_base_stands_while_it_is_prepared(robot):
    base = robot["base"]
    first = navigate(robot, "never", base.x + 2.0, base.y, frame_id="odom")
    wait_until(lambda: first.feedback and first.feedback[-1].cmd.linear.x > 0, 10.0, "driving")
    base.scanning = False  # the scan goes stale: the first goal stops, the newer one waits for it, then is refused
    wait_until(lambda: first.feedback[-1].reasoning.startswith("stopped:"), 5.0, "the first goal stopped")
    try:
        ended: list[str] = []  # the order the two results arrive in (by their callbacks: no timing to flake)
        first.handle.get_result_async().add_done_callback(lambda _: ended.append("first"))
        second = navigate(robot, "never", base.x - 1.0, base.y, frame_id="odom")
        second.handle.get_result_async().add_done_callback(lambda _: ended.append("second"))
        done = first.result(timeout=5.0)
        assert (done.result.error_code, done.result.message) == ("CANCELLED", "preempted by a newer goal")
        assert_stands_still(base, 0.3)
        out = second.result(timeout=10.0)
    finally:
        base.scanning = True
    assert out.status == GoalStatus.STATUS_ABORTED and out.result.error_code == "FAILED_PRECONDITION"
    wait_until(lambda: len(ended) == 2, 5.0, "both results' callbacks")
    assert ended == ["first", "second"]  # preempted at once, before the newer goal's own wait (input_timeout_s) ends


class FailingSource:
    """An obstacle source whose reading cannot be processed: a bug, a corrupt message (fault injection)."""

    name = "failing source"

    def age(self, now_ns: int) -> float:
        return 0.0

    def blocking(self, radius_m: float, clearance_m: float, odometry, memory_s: float) -> None:
        raise RuntimeError("the reading cannot be processed")


def test_a_replan_that_fails_stops_the_base_and_ends_internal(robot):
    node, base = robot["nodes"]["never"], robot["base"]
    goal = navigate(robot, "never", base.x + 2.0, base.y, frame_id="odom")
    wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving")
    node._sources.append(FailingSource())
    try:
        out = goal.result(timeout=5.0)
        assert_stands_still(base)
    finally:
        node._sources.pop()
    assert out.status == GoalStatus.STATUS_ABORTED and out.result.error_code == "INTERNAL"
    assert "RuntimeError: the reading cannot be processed" in out.result.message


class StallingSource:
    """An obstacle source that sees nothing and holds one replan for ``stall_s`` (the executor busy, a long callback):
    the base must not keep the last command meanwhile."""

    name = "stalling source"

    def __init__(self, stall_s: float) -> None:
        self.stall_s, self.stalled, self.over = stall_s, threading.Event(), threading.Event()

    def age(self, now_ns: int) -> float:
        return 0.0

    def unshifted_s(self) -> float:
        return 0.0

    def blocking(self, radius_m: float, clearance_m: float, odometry, memory_s: float) -> None:
        if not self.stalled.is_set():
            self.stalled.set()
            time.sleep(self.stall_s)
            self.over.set()


def test_a_late_replan_stops_the_base_until_it_comes(robot):
    """Driving at 5 Hz replans, one stalls 4 s: the command it would have replaced lasts 1.5 periods from its
    obstacle check (what the top speed covered), then the base stands until the replan comes (which, that late,
    stops it too), and drives on to the target after it."""
    node, base = robot["nodes"]["never"], robot["base"]
    goal = navigate(robot, "never", base.x + 1.0, base.y, frame_id="odom")
    wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving")
    source = StallingSource(4.0)
    node._sources.append(source)
    try:
        assert source.stalled.wait(5.0)
        wait_until(lambda: base._command == (0.0, 0.0), 1.0, "a stop while the replan is late")
        assert_stands_still(base)
        assert not source.over.is_set() and goal.feedback[-1].cmd.linear.x > 0  # the stop was no replan's
        out = goal.result(timeout=30.0)
    finally:
        node._sources.remove(source)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message


class StallingObstacle(StallingSource):
    """A source that always sees an obstacle just ahead, not within the footprint (a turn in place is safe), and holds
    its third replan for ``stall_s``; ``fed`` is how much feedback the goal had when that replan went on."""

    name = "stalling obstacle"

    def __init__(self, stall_s: float, feedback: list) -> None:
        super().__init__(stall_s)
        self.calls, self.feedback, self.fed = 0, feedback, -1

    def blocking(self, radius_m: float, clearance_m: float, odometry, memory_s: float) -> Blocking:
        self.calls += 1
        if self.calls == 3:
            super().blocking(radius_m, clearance_m, odometry, memory_s)
            self.fed = len(self.feedback)  # (every earlier replan's feedback arrived during the stall)
        return Blocking(gap_m=0.1, ahead_m=0.3)


def test_a_late_replan_sends_no_turn_in_place(robot):
    """A target behind the base and an obstacle just ahead: each replan on time turns in place toward it; the one held
    1 s (its check too old to act on) sends a zero Twist and says the safety stop, no turn."""
    node, base = robot["nodes"]["never"], robot["base"]
    goal = navigate(robot, "never", base.x - math.cos(base.yaw), base.y - math.sin(base.yaw), frame_id="odom")
    source = StallingObstacle(1.0, goal.feedback)
    node._sources.append(source)
    try:
        assert source.over.wait(10.0)
        wait_until(lambda: len(goal.feedback) > source.fed, 5.0, "the late replan's feedback")
        goal.cancel()
        goal.result(timeout=10.0)
    finally:
        node._sources.remove(source)
    turns = [f for f in goal.feedback[: source.fed] if f.reasoning.startswith("turning in place: safety stop")]
    assert turns and all(f.cmd.angular.z != 0.0 and f.cmd.linear.x == 0.0 for f in turns)
    late = goal.feedback[source.fed]
    assert late.cmd == Twist() and late.reasoning.startswith("safety stop"), late.reasoning


def test_without_a_transform_to_the_target_frame_it_ends_tf_error_within_the_wait(robot):
    start = time.monotonic()
    out = navigate(robot, "world", 1.0, 1.0, frame_id="").result(timeout=10.0)  # '' = map_frame = world
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "TF_ERROR" and "odom <- world" in out.result.message, out.result.message
    assert 1.0 <= time.monotonic() - start < 5.0  # transform_wait_s, then no longer


def test_a_transform_that_stops_coming_stops_the_robot_then_tf_error(robot):
    robot["nodes"]["never"].set_parameters([Parameter("blocked_timeout_s", value=1.0)])
    try:
        goal = navigate(robot, "never", 0.0, -1.0)
        wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving")
        robot["base"].broadcasting = False
        out = goal.result(timeout=15.0)
    finally:
        robot["base"].broadcasting = True
        robot["nodes"]["never"].set_parameters([Parameter("blocked_timeout_s", value=10.0)])
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "TF_ERROR" and "extrapolate" in out.result.message, out.result.message
    stops = [f for f in goal.feedback if f.reasoning.startswith("stopped:")]
    assert stops and all(f.cmd.linear.x == f.cmd.angular.z == 0.0 for f in stops)


def test_always_without_a_nav2_server_is_unavailable(robot):
    out = navigate(robot, "always", *TARGET_IN_MAP).result(timeout=10.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "UNAVAILABLE" and "/navigate_to_pose" in out.result.message


@pytest.mark.parametrize("name", ["auto", "always"])
def test_hands_the_goal_to_nav2_and_relays_its_feedback_and_result(robot, with_nav2, name):
    sent = len(with_nav2.goals)
    goal = navigate(robot, name, *TARGET_IN_MAP)
    out = goal.result(timeout=10.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED and out.result.message == "nav2 reached the target"
    (target,) = with_nav2.goals[sent:]
    assert target.header.frame_id == "map" and (target.pose.position.x, target.pose.position.y) == TARGET_IN_MAP
    relayed = [f for f in goal.feedback if f.current_pose.header.frame_id == "map"]
    assert [f.navigation_time.sec for f in relayed] == [0, 1, 2, 3, 4]
    assert [f.estimated_time_remaining.sec for f in relayed] == [5, 4, 3, 2, 1]
    assert math.isclose(relayed[-1].distance_remaining, 0.2, abs_tol=1e-6) and relayed[-1].cmd.linear.x == 0.0


def test_cancelling_the_goal_cancels_nav2s(robot, with_nav2):
    with_nav2.ending = "wait"
    goal = navigate(robot, "auto", *TARGET_IN_MAP)
    goal.wait_feedback(1)
    goal.cancel()
    out = goal.result(timeout=10.0)
    assert with_nav2.cancel_requests == 1  # answered before our result was sent
    assert out.status == GoalStatus.STATUS_CANCELED and out.result.message == "cancelled by the client"
    wait_until(lambda: with_nav2.cancelled, 5.0, "nav2's goal cancelled")


def test_a_robot_nav2_reports_beyond_reach_ends_out_of_range_and_nav2s_goal_is_cancelled(robot, with_nav2):
    """max_target_distance_m holds on the nav2 path too, where only nav2's feedback places the robot (its map pose)."""
    with_nav2.ending, with_nav2.pose_x = "wait", -150.0  # the target (1.5, 0) is over 100 m away from there
    out = navigate(robot, "auto", *TARGET_IN_MAP).result(timeout=10.0)
    assert out.status == GoalStatus.STATUS_ABORTED and out.result.error_code == "OUT_OF_RANGE", out.result.message
    assert "the target's distance from the robot" in out.result.message and with_nav2.cancel_requests == 1
    wait_until(lambda: with_nav2.cancelled, 5.0, "nav2's goal cancelled")


def test_nav2_failures_come_back_with_our_codes_and_bad_feedback_is_dropped(robot, with_nav2):
    with_nav2.ending, with_nav2.bad_feedback = "tf_error", True
    goal = navigate(robot, "auto", *TARGET_IN_MAP)
    out = goal.result(timeout=10.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "TF_ERROR" and "error_code 9002" in out.result.message, out.result.message
    assert not [f for f in goal.feedback if not math.isfinite(f.current_pose.pose.position.x)]


def test_a_goal_nav2_accepts_too_late_is_cancelled_not_left_driving(robot, with_nav2):
    """nav2 answers after service_wait_s (3 s): our goal ends UNAVAILABLE, and the goal nav2 then accepts (at 4.5 s,
    within the second service_wait_s the handoff gives a late answer) is cancelled (nobody would watch it, stop it at
    our deadline or relay its end) before our result is sent."""
    with_nav2.ending, with_nav2.answer_after_s = "wait", 4.5
    sent = len(with_nav2.goals)
    out = navigate(robot, "answer_wait", *TARGET_IN_MAP).result(timeout=20.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.message == "nav2 did not answer the goal within 3 s" and with_nav2.cancel_requests == 1
    wait_until(lambda: len(with_nav2.goals) > sent and with_nav2.cancelled, 5.0, "the late goal cancelled")


def test_a_node_destroyed_while_driving_leaves_the_base_standing(robot):
    """Shutting down mid-goal (Ctrl-C: ``spin`` destroys the node before rclpy goes) ends the goal and sends a last
    zero Twist, acknowledged: a base without a cmd_vel timeout does not keep driving."""
    node = NavigationNode(context=robot["context"], namespace="leaving", cli_args=inference_at("/"),
                          parameter_overrides=[Parameter(k, value=v) for k, v in NODES["never"].items()])  # fmt: skip
    robot["executor"].add_node(node)
    base = robot["base"]
    goal = navigate(robot, "leaving", base.x + 3.0, base.y, frame_id="odom")
    wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving")
    robot["executor"].remove_node(node)
    node.destroy_node()
    assert_stands_still(base)


@contextmanager
def driving_through_own_nav2(robot, namespace: str, mode: str = "always"):
    """A navigation node in ``namespace`` (``mode``: its nav2 parameter) with a nav2 stand-in of its own (waiting
    until cancelled) that has taken its goal: (node, stand-in, goal); both removed after (the stand-in unless the
    test removed it)."""
    action = f"/{namespace}/navigate_to_pose"
    nav2 = StandInNav2(robot["context"], action)
    nav2.ending = "wait"
    node = NavigationNode(context=robot["context"], namespace=namespace, cli_args=inference_at("/"),
                          parameter_overrides=[Parameter(k, value=v) for k, v in
                                               (WIRING | {"nav2": mode, "nav2_action": action}).items()])  # fmt: skip
    executor = robot["executor"]
    executor.add_node(nav2)
    executor.add_node(node)
    try:
        wait_until(node._nav2.client.server_is_ready, 10.0, "nav2 seen")
        goal = navigate(robot, namespace, *TARGET_IN_MAP)
        goal.wait_feedback(1)
        yield node, nav2, goal
    finally:
        for each in (node, nav2):
            if each in executor.get_nodes():
                executor.remove_node(each)
                each.destroy_node()


def test_a_nav2_that_goes_away_mid_goal_ends_it_unavailable(robot):
    """nav2's server disappears while it drives our goal (crashed, shut down): its result will never come, so the
    goal ends UNAVAILABLE within moments, not DEADLINE_EXCEEDED after max_duration_s."""
    with driving_through_own_nav2(robot, "vanishing") as (_, nav2, goal):
        robot["executor"].remove_node(nav2)
        nav2.destroy_node()
        gone_at = time.monotonic()
        out = goal.result(timeout=15.0)
        # ended at once (0.26 s), reported after 3 cancels of 1 s each (nav2 out of sight may be a discovery glitch
        # hiding a nav2 still driving); max_duration_s is minutes
        assert time.monotonic() - gone_at < 8.0
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.message == "nav2's /vanishing/navigate_to_pose went away during the goal; nav2 did not confirm " \
        "the cancel of its goal after 3 requests (no answer within 1 s): it may still drive the base"  # fmt: skip


def test_after_a_nav2_that_may_still_drive_the_built_in_driver_does_not_drive_beside_it(robot):
    """nav2 went away mid-goal, its cancel never confirmed (a discovery glitch may hide a nav2 still driving): the
    next goal, which auto would give the built-in driver, is refused rather than commanding the base beside nav2."""
    with driving_through_own_nav2(robot, "loose", mode="auto") as (node, nav2, goal):
        robot["executor"].remove_node(nav2)
        nav2.destroy_node()
        assert goal.result(timeout=15.0).status == GoalStatus.STATUS_ABORTED
        out = navigate(robot, "loose", robot["base"].x + 0.5, robot["base"].y, frame_id="odom").result(timeout=20.0)
    assert out.status == GoalStatus.STATUS_ABORTED and out.result.error_code == "FAILED_PRECONDITION"
    assert out.result.message.startswith("the built-in driver would command the base beside nav2 (nav2 did not "
                                         "confirm the cancel of its goal after 3 requests"), out.result.message


def test_a_cancel_nav2_refuses_is_asked_again_and_named_in_the_result(robot):
    """nav2 refuses to cancel (or the request is lost): asked CANCEL_TRIES times, then the result, sent only after the
    last answer, says nav2 may still drive (and the node logs it as an error)."""
    with driving_through_own_nav2(robot, "stubborn") as (_, nav2, goal):
        nav2.cancel_answer = CancelResponse.REJECT
        goal.cancel()
        out = goal.result(timeout=10.0)
        assert nav2.cancel_requests == CANCEL_TRIES, out.result.message
    assert out.status == GoalStatus.STATUS_CANCELED
    assert out.result.message == f"cancelled by the client; nav2 did not confirm the cancel of its goal after " \
        f"{CANCEL_TRIES} requests (refused, return code 0): it may still drive the base"  # fmt: skip


def test_shutting_down_mid_goal_cancels_the_goal_handed_to_nav2(robot):
    """Ctrl-C while nav2 drives our goal: ``spin`` ends the goal while the executor still runs
    (``end_for_shutdown``), so nav2's goal is cancelled as with any ending; a client going away would not stop it."""
    with driving_through_own_nav2(robot, "leaving_nav2") as (node, nav2, goal):
        node.end_for_shutdown(5.0)
        assert nav2.cancel_requests == 1  # answered before it returned
        wait_until(lambda: nav2.cancelled, 5.0, "nav2's goal cancelled")
        assert goal.result(timeout=5.0).status == GoalStatus.STATUS_ABORTED


def test_shutting_down_waits_for_a_goal_that_ended_and_still_cancels_nav2s(robot):
    """A goal that ended just before Ctrl-C (cancelled by its client) and is still waiting for nav2 to confirm the
    cancel: the shutdown waits for it, as long as nav2's answers may take (``settle_s``) even when that is longer
    than the shutdown's own wait (here 0.1 s against three cancels answered 0.3 s each), so its cancels are sent and
    its result (naming nav2's refusal) goes out."""
    with driving_through_own_nav2(robot, "settling") as (node, nav2, goal):
        nav2.cancel_answer, nav2.cancel_after_s = CancelResponse.REJECT, 0.3
        goal.cancel()
        wait_until(lambda: nav2.cancel_requests >= 1, 5.0, "the first cancel asked")
        node.end_for_shutdown(0.1)
        assert nav2.cancel_requests == CANCEL_TRIES
        out = goal.result(timeout=1.0)
    assert out.status == GoalStatus.STATUS_CANCELED and "did not confirm the cancel" in out.result.message


def test_shutting_down_while_a_goal_prepares_never_starts_it(robot):
    """Ctrl-C while a newer goal waits for the one it preempted to settle (nav2 confirms the cancel slowly): the
    shutdown waits for the older goal only, so the newer one must not start once that settles: it ends (the node is
    shutting down) and is never handed to nav2, which nothing would be left to cancel."""
    with driving_through_own_nav2(robot, "preparing") as (node, nav2, first):
        nav2.cancel_after_s = 1.0
        second = navigate(robot, "preparing", *TARGET_IN_MAP)
        wait_until(lambda: nav2.cancel_requests >= 1, 5.0, "the first goal's cancel asked")
        node.end_for_shutdown(5.0)
        out = second.result(timeout=5.0)
        older = first.result(timeout=5.0)
    assert older.status == GoalStatus.STATUS_ABORTED and older.result.message == "preempted by a newer goal"
    assert out.status == GoalStatus.STATUS_ABORTED and out.result.message == "the node is shutting down"
    assert len(nav2.goals) == 1


def test_a_target_in_odom_ends_when_the_odometry_restarts(robot):
    """The base's odometry jumps (a base controller restarted somewhere else, here 5 m on): a target given in odom
    is of the frame before, so driving on to its numbers would end "reached" somewhere else; the goal ends TF_ERROR
    and the base is stopped. (Last in the file: the base is left 5 m on.)"""
    base = robot["base"]
    goal = navigate(robot, "never", base.x + 2.0, base.y, frame_id="odom")
    wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving")
    base.x += 5.0
    out = goal.result(timeout=10.0)
    assert out.status == GoalStatus.STATUS_ABORTED and out.result.error_code == "TF_ERROR", out.result.message
    assert "the odometry restarted" in out.result.message
    assert_stands_still(base)
