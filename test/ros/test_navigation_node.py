"""`navigation_node` through real rclpy nodes in the closed simulation loop (camera_sim drives the robot by
/cmd_vel and publishes /odom in odom and its TF tree) with the real SmolLM2 as language head: it reaches a target in
the map frame through camera_sim's map -> odom transform, plans on /plan (in odom), stops for an obstacle ahead (OBSTACLE after the blocked timeout), cancels promptly with a zero TwistStamped
and no KV block leaked, stands still when odometry and the sensors stop (UNAVAILABLE once it lasts), refuses a goal
without a live obstacle source (FAILED_PRECONDITION), and answers INVALID_ARGUMENT / OUT_OF_RANGE
/ UNAVAILABLE with a clear code (a target 1e30 m away at once, without memory growth)."""

import math
import os
import time

import pytest
from action_msgs.msg import GoalStatus
from geometry_msgs.msg import PoseStamped, Twist, TwistStamped
from inference_client import MODEL_TIMEOUT, Capture
from nav_msgs.msg import Odometry, Path
from oxygen_ros.action import Navigate
from rclpy.parameter import Parameter
from ros_harness import send_goal, wait_until
from task_graph import task_graph

from oxygen_ros.nodes.navigation_node import PARAMETERS, NavigationNode
from oxygen_ros.nodes.tf.backend import Transforms

BELOW_THE_OBSTACLE = (1.0, 0.45)  # seed 0: the robot starts at (1.37, 0.35); the obstacle walks along y = 1.13


@pytest.fixture(scope="module")
def graph(ros_domain_id):
    parameters = {"service_wait_s": 0.5, "reasoning_period_s": 2.0, "max_new_tokens": 24}
    with task_graph(ros_domain_id, NavigationNode, **parameters) as (graph, node):
        graph.node = node
        graph.cmd_vel = Capture(graph.client, TwistStamped, "/cmd_vel", 100)  # Jazzy's diff_drive_controller
        graph.plans = Capture(graph.client, Path, "/plan", 100)
        graph.odom = Capture(graph.client, Odometry, "/odom", 100)
        graph.tf = Transforms(graph.client, tolerance_s=0.5)
        yield graph


def navigate(graph, x: float, y: float, frame_id: str = "map", instruction: str = ""):
    target = PoseStamped()
    target.header.frame_id = frame_id
    target.pose.position.x, target.pose.position.y = x, y
    target.pose.orientation.w = 1.0
    return send_goal(graph.client, Navigate, "/navigate", Navigate.Goal(target=target, instruction=instruction))


def twists(graph) -> list[Twist]:
    """The velocity commands sent so far; each is stamped in the base frame (REP 105)."""
    sent = list(graph.cmd_vel.messages)
    assert all(msg.header.frame_id == "base_link" for msg in sent)
    return [msg.twist for msg in sent]


def tune(graph, **values) -> None:
    results = graph.node.set_parameters([Parameter(name, value=value) for name, value in values.items()])
    assert all(r.successful for r in results), results


def position(odom: Odometry) -> tuple[float, float]:
    return odom.pose.pose.position.x, odom.pose.pose.position.y


def standing(graph) -> Odometry:
    """camera_sim's odometry once it drives with the zero command (an Odometry's twist is the command its frame
    moved with), checked to stay there over the next frames: where the robot stopped."""
    seen = len(graph.odom.messages)
    wait_until(lambda: any(m.twist.twist == Twist() for m in graph.odom.messages[seen:]), 5.0, "odometry at rest")
    first = next(i for i, m in enumerate(graph.odom.messages) if i >= seen and m.twist.twist == Twist()) + 1
    wait_until(lambda: len(graph.odom.messages) >= first + 4, 5.0, "four frames at rest")
    at = graph.odom.messages[first]
    assert all(math.dist(position(at), position(m)) < 0.01 for m in graph.odom.messages[first:first + 4]), \
        "the robot stands still"  # fmt: skip
    return at


def in_map(graph, odom: Odometry) -> tuple[float, float]:
    """Where the odometry puts the robot on the map, through camera_sim's TF tree."""
    assert (odom.header.frame_id, odom.child_frame_id) == ("odom", "base_link")
    x, y, _ = graph.tf.lookup("map", "odom")[0].apply((*position(odom), 0.0))
    return x, y


def test_unavailable_while_the_inference_node_is_absent(graph):
    start = time.monotonic()
    out = navigate(graph, *BELOW_THE_OBSTACLE).result()
    assert out.status == GoalStatus.STATUS_ABORTED
    assert (out.result.error_code, out.result.success) == ("UNAVAILABLE", False)
    assert time.monotonic() - start < 5.0
    graph.start_inference()


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize(
    "x, y, frame_id, code, complaint",
    [
        (math.nan, 1.0, "map", "INVALID_ARGUMENT", "finite"),
        (1.0, math.inf, "map", "INVALID_ARGUMENT", "finite"),
        (1e30, 1.0, "map", "OUT_OF_RANGE", "more than the bound of 100 m"),  # once grew a path of 1e31 points
        (1e6, 1.0, "map", "OUT_OF_RANGE", "more than the bound of 100 m"),
        (1.0, 1.0, "base_link", "INVALID_ARGUMENT", "frame 'map' or 'odom'"),
    ],
)
def test_bad_targets_are_refused_at_once_without_memory_growth(graph, x, y, frame_id, code, complaint):
    graph.odom.wait_for(lambda _: True)  # the robot's pose is known: the distance is checked on the goal itself
    rss = resident_bytes()
    goal = navigate(graph, x, y, frame_id)  # accepted (the client's discovery is not timed)
    start = time.monotonic()
    out = goal.result()
    assert time.monotonic() - start < 1.0 and not goal.feedback  # refused at once: no plan, no drive
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == code and complaint in out.result.message, out.result.message
    assert resident_bytes() - rss < 64 << 20


def test_drives_to_the_target_in_the_map_frame(graph):
    start = graph.odom.wait_for(lambda _: True)
    goal = navigate(graph, *BELOW_THE_OBSTACLE, instruction="stay below the obstacle")
    out = goal.result(timeout=60.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    assert out.result.success and out.result.distance_remaining <= PARAMETERS["goal_tolerance_m"][0]
    wait_until(lambda: twists(graph)[-1] == Twist(), 2.0, "a final zero Twist")
    assert any(t.linear.x > 0.05 for t in twists(graph)), "it drove forwards"
    assert any(abs(t.angular.z) > 0.1 for t in twists(graph)), "it turned towards the target"
    end = in_map(graph, standing(graph))
    assert math.dist(end, BELOW_THE_OBSTACLE) <= 0.12, end
    assert math.dist(in_map(graph, start), BELOW_THE_OBSTACLE) > 0.3
    assert math.dist(position(start), (0.0, 0.0)) < 0.01  # odom starts where the robot did (REP 105)
    plan = graph.plans.messages[-1]
    assert plan.header.frame_id == "odom" and len(plan.poses) >= 2
    last = plan.poses[-1].pose.position
    assert math.dist(graph.tf.lookup("map", "odom")[0].apply((last.x, last.y, 0.0))[:2], BELOW_THE_OBSTACLE) < 1e-6
    distances = [f.distance_remaining for f in goal.feedback]
    assert distances and distances[0] > distances[-1]
    pose, elapsed = goal.feedback[-1].current_pose, goal.feedback[-1].navigation_time
    assert pose.header.frame_id == "odom" and 0 < elapsed.sec + elapsed.nanosec * 1e-9 < 60.0


def test_safety_stop_then_obstacle_after_the_blocked_timeout(graph):
    tune(graph, safety_clearance_cm=400.0, blocked_timeout_s=1.0)  # any obstacle ahead is too close
    try:
        goal = navigate(graph, 1.0, 1.8)  # north, across the obstacle's walk
        out = goal.result(timeout=30.0)
    finally:
        tune(graph, safety_clearance_cm=PARAMETERS["safety_clearance_cm"][0], blocked_timeout_s=10.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "OBSTACLE" and "safety stop" in out.result.message
    stops = [f for f in goal.feedback if f.reasoning.startswith("safety stop")]
    assert stops and all(f.cmd == Twist() for f in stops)
    assert twists(graph)[-1] == Twist()


def test_cancel_stops_the_robot_promptly_without_leaking_blocks(graph):
    tune(graph, max_linear_mps=0.1)  # slow enough for the language head to answer on the way
    try:
        goal = navigate(graph, 2.5, 0.45)
        wait_until(lambda: any(f.reasoning for f in goal.feedback), MODEL_TIMEOUT, "the language head's reasoning")
        reasoning = next(f.reasoning for f in goal.feedback if f.reasoning)
        assert not reasoning.startswith("(language head"), reasoning
        wait_until(lambda: goal.feedback[-1].cmd.linear.x > 0, 10.0, "driving")
        cancelled_at = time.monotonic()
        goal.cancel()
        out = goal.result()
    finally:
        tune(graph, max_linear_mps=PARAMETERS["max_linear_mps"][0])
    assert time.monotonic() - cancelled_at < 2.0
    assert out.status == GoalStatus.STATUS_CANCELED and out.result.error_code == "CANCELLED"
    assert 0 < out.result.distance_remaining < 1.6
    wait_until(lambda: twists(graph)[-1] == Twist(), 2.0, "a zero Twist after the cancel")
    standing(graph)
    graph.idle_pool()


def test_when_odometry_and_the_sensors_stop_coming_it_stands_still_then_aborts_unavailable(graph):
    tune(graph, blocked_timeout_s=1.0)
    try:
        goal = navigate(graph, 2.5, 0.45)
        wait_until(lambda: goal.feedback and goal.feedback[-1].cmd.linear.x > 0, 20.0, "driving")
        graph.executor.remove_node(graph.camera)  # camera_sim publishes all of them: from here on nothing arrives
        out = goal.result(timeout=30.0)
    finally:
        tune(graph, blocked_timeout_s=10.0)
        graph.executor.add_node(graph.camera)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "UNAVAILABLE" and "no odometry on /odom" in out.result.message
    stops = [f for f in goal.feedback if f.reasoning.startswith("stopped:")]
    assert stops and all(f.cmd == Twist() for f in stops)


def test_an_input_timeout_past_nav2s_source_timeout_is_refused(graph):
    """Odometry or a scan over 2 s old (nav2 collision monitor's default source_timeout) says nothing of someone who
    walked in since: input_timeout_s may not be set past it, and the value in force stays."""
    before = graph.node.get_parameter("input_timeout_s").value
    (result,) = graph.node.set_parameters([Parameter("input_timeout_s", value=2.5)])
    assert not result.successful
    assert graph.node.get_parameter("input_timeout_s").value == before
    tune(graph, input_timeout_s=2.0)  # the bound itself is allowed
    tune(graph, input_timeout_s=before)


def test_without_live_obstacle_sources_a_goal_is_refused(graph):
    graph.executor.remove_node(graph.camera)  # its laser scan and its frames (the simulated detector) go stale
    time.sleep(PARAMETERS["input_timeout_s"][0] + 0.2)
    sent = len(graph.cmd_vel.messages)
    try:
        out = navigate(graph, 2.0, 0.45).result(timeout=10.0)
    finally:
        graph.executor.add_node(graph.camera)
    assert out.status == GoalStatus.STATUS_ABORTED and out.result.error_code == "FAILED_PRECONDITION"
    assert "no LaserScan on /scan, camera detector (simulation) in 0.5 s" in out.result.message, out.result.message
    wait_until(lambda: len(twists(graph)) > sent, 2.0, "a velocity command for the refused goal")
    assert all(twist == Twist() for twist in twists(graph)[sent:])
