"""The navigation node's parameters: defaults with descriptions, which are read once, their ranges, and the check of
its read-once strings (apart from the node, as ``inference_params`` is for the inference node)."""

from typing import Any

from oxygen_ros.nodes import bounds, latest_frame
from oxygen_ros.nodes.declare import Ranges, Table
from oxygen_ros.nodes.nav2_handoff import MODES

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
    "service_wait_s": (1.0, "how long to wait for /oxygen/infer (and nav2 with nav2: always) to appear, seconds"),
    "map_frame": ("map", "the frame of targets (REP 105 map); '' in a target's header means it"),
    "odom_frame": ("odom", "the frame of odometry (others are ignored), of the plan, and where the robot drives"),
    "transform_wait_s": (2.0, "how long a goal waits for its map -> odom transform before TF_ERROR, seconds"),
    "transform_tolerance_s": (0.5, "a transform this much older or newer than the odometry still counts, seconds"),
    "nav2": ("auto", f"hand goals to nav2's NavigateToPose: {' | '.join(MODES)} (auto: when a server is there)"),
    "nav2_action": ("navigate_to_pose", "nav2's NavigateToPose action (bt_navigator)"),
    "odom_topic": ("odom", "nav_msgs/Odometry input: the robot's pose in odom_frame (others are ignored)"),
    "cmd_vel_topic": ("cmd_vel", "velocity command output (geometry_msgs/TwistStamped, or Twist: cmd_vel_stamped)"),
    "cmd_vel_stamped": (True, "send TwistStamped (Jazzy's diff_drive_controller, nav2); false = Twist (older stacks)"),
    **latest_frame.PARAMETERS,
}
# Read once, at start: refused when set later (read_only). The others are read on every replan.
READ_ONCE = ["service_wait_s", "infer_timeout_s", "map_frame", "odom_frame", "transform_wait_s",
             "transform_tolerance_s", "nav2", "nav2_action", "odom_topic", "cmd_vel_topic", "cmd_vel_stamped",
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
    "transform_wait_s": (0.0, 600.0),
    "transform_tolerance_s": (0.0, 10.0),
}
POSITIVE = [name for name in RANGES if name != "transform_tolerance_s"]  # a tolerance of 0 means exact times


def settings_problem(settings: dict[str, Any]) -> str:
    """What is wrong with the read-once string parameters ('' = nothing)."""
    if settings["nav2"] not in MODES:
        return f"parameter nav2 must be one of {', '.join(MODES)}, got {settings['nav2']!r}"
    frames = (settings["map_frame"], settings["odom_frame"])
    if not all(0 < len(frame) <= bounds.ID_CHARS for frame in frames) or frames[0] == frames[1]:
        return f"parameters map_frame and odom_frame must be two different frame ids, got {frames}"
    return ""
