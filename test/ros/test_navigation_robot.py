"""`navigation_node` as on a robot, through real rclpy nodes and no simulator: a stand-in base (driven by cmd_vel,
odometry in `odom`, a camera) and a map -> odom transform the test publishes on /tf; the language head is the echo
server. A target in `map` is reached through that transform (odom is rotated and shifted against map), a missing
transform ends the goal TF_ERROR within transform_wait_s, and with a stand-in nav2 NavigateToPose server the goal is
handed to it: its feedback (pose, elapsed, remaining) and result are relayed, a cancel reaches it, its failures come
back with our codes and its malformed feedback is dropped."""

import math
import time

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from echo_servers import EchoServers
from geometry_msgs.msg import PoseStamped, TransformStamped, TwistStamped
from nav2_msgs.action import NavigateToPose
from nav_msgs.msg import Odometry
from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_harness import make_context, send_goal, spin_nodes, wait_until
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from oxygen_ros.action import Navigate
from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes.infer_client import inference_at
from oxygen_ros.nodes.navigation_node import NavigationNode
from oxygen_ros.tf import topics
from oxygen_ros.tf.rigid import planar

RATE_HZ = 20.0
MAP_TO_ODOM = planar(2.0, -1.0, math.pi / 2)  # where odometry started on the map, and facing north
TARGET_IN_MAP = (1.5, 0.0)  # 1 m "forward" and 0.5 m "right" of odom's origin: (1.0, 0.5) in odom


class Base(Node):
    """A unicycle base: integrates TwistStamped cmd_vel, publishes odometry in odom and a camera frame each tick,
    and (``broadcasting``) map -> odom on /tf, stamped like the odometry."""

    def __init__(self, context) -> None:
        super().__init__("stand_in_base", context=context)
        self.x = self.y = self.yaw = 0.0
        self.broadcasting = True
        self._command = (0.0, 0.0)
        self._odom = self.create_publisher(Odometry, "/odom", 10)
        self._camera = self.create_publisher(Image, "/camera/image_raw", qos_profile_sensor_data)
        self._tf = topics.TransformBroadcaster(self)
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
        self._odom.publish(odom)
        camera = Header(stamp=header.stamp, frame_id="camera_optical_frame")
        self._camera.publish(rgb_to_image(np.zeros((48, 64, 3), np.uint8), camera))
        if self.broadcasting:
            transform = TransformStamped(child_frame_id="odom", transform=MAP_TO_ODOM.to_msg())
            transform.header.stamp, transform.header.frame_id = header.stamp, "map"
            self._tf.sendTransform(transform)


class StandInNav2(Node):
    """nav2's bt_navigator as seen from outside: a NavigateToPose server whose behaviour a test sets."""

    def __init__(self, context) -> None:
        super().__init__("stand_in_bt_navigator", context=context)
        self.goals: list[PoseStamped] = []
        self.cancelled = False
        self.ending = "succeed"  # succeed | tf_error | wait (until cancelled)
        self.bad_feedback = False
        self._server = ActionServer(self, NavigateToPose, "/navigate_to_pose", self._execute,
                                    cancel_callback=lambda _: CancelResponse.ACCEPT,
                                    callback_group=ReentrantCallbackGroup())  # fmt: skip

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
            feedback.current_pose.pose.position.x = math.nan if self.bad_feedback else 0.2 * step
            feedback.current_pose.pose.orientation.w = 1.0
            feedback.navigation_time.sec, feedback.estimated_time_remaining.sec = step, 5 - step
            goal_handle.publish_feedback(feedback)
            time.sleep(0.05)
        if self.ending == "tf_error":
            goal_handle.abort()
            return NavigateToPose.Result(error_code=NavigateToPose.Result.TF_ERROR, error_msg="no map -> odom")
        goal_handle.succeed()
        return NavigateToPose.Result()


WIRING = {"odom_topic": "/odom", "cmd_vel_topic": "/cmd_vel", "camera_topic": "/camera/image_raw",
          "nav2_action": "/navigate_to_pose", "service_wait_s": 2.0, "transform_wait_s": 1.0, "reasoning_period_s": 0.5}
NODES = {"never": {"nav2": "never"}, "auto": {"nav2": "auto"}, "always": {"nav2": "always"},
         "world": {"nav2": "never", "map_frame": "world"}}  # no one publishes world -> odom


@pytest.fixture(scope="module")
def robot(ros_domain_id):
    """One base, the echo language head and navigation nodes in their own namespaces (each its own `navigate`)
    wired to the one base; the nav2 stand-in joins later (``with_nav2``)."""
    context = make_context(ros_domain_id)
    base, echo, client = Base(context), EchoServers(context), Node("navigation_robot_client", context=context)
    nodes = {name: NavigationNode(context=context, namespace=name, cli_args=inference_at("/"),
                                  parameter_overrides=[Parameter(k, value=v) for k, v in (WIRING | extra).items()])
             for name, extra in NODES.items()}  # fmt: skip
    graph = {"context": context, "client": client, "base": base, "nodes": nodes, "nav2": None}
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
    nav2.ending, nav2.bad_feedback, nav2.cancelled = "succeed", False, False
    for name in ("auto", "always"):
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
    assert out.status == GoalStatus.STATUS_CANCELED
    wait_until(lambda: with_nav2.cancelled, 5.0, "nav2's goal cancelled")


def test_nav2_failures_come_back_with_our_codes_and_bad_feedback_is_dropped(robot, with_nav2):
    with_nav2.ending, with_nav2.bad_feedback = "tf_error", True
    goal = navigate(robot, "auto", *TARGET_IN_MAP)
    out = goal.result(timeout=10.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "TF_ERROR" and "error_code 9002" in out.result.message, out.result.message
    assert not [f for f in goal.feedback if not math.isfinite(f.current_pose.pose.position.x)]
