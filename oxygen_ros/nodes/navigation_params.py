"""The navigation node's parameters: defaults with descriptions, which are read once, their ranges, and the check of
its read-once strings (apart from the node, as ``inference_params`` is for the inference node)."""

from typing import Any

from oxygen_ros import bounds
from oxygen_ros.nodes import latest_frame
from oxygen_ros.nodes.declare import Ranges, Table
from oxygen_ros.nodes.nav2_handoff import MODES

PARAMETERS: Table = {
    "replan_rate_hz": (5.0, "how often the path and the velocity command are recomputed, per second (from the next "
                       "goal; under use_sim_time no faster than the simulator's /clock)"),
    "safety_clearance_cm": (25.0, "stop when an obstacle point ahead is closer than this to the robot's footprint, cm"),
    "goal_tolerance_m": (0.1, "the goal is reached within this distance, metres"),
    "max_target_distance_m": (
        bounds.TARGET_DISTANCE_M,
        "targets farther from the robot are aborted OUT_OF_RANGE, metres",
    ),
    "max_linear_mps": (0.3, "top forward speed, m/s"),
    "max_angular_rps": (1.0, "top turn rate, rad/s"),
    "max_decel_mps2": (1.0, "how hard the base brakes from a zero command (its controller's or velocity smoother's "
                       "deceleration limit), m/s^2: the top speed leaves room to stop within the clearance"),
    "blocked_timeout_s": (10.0, "abort OBSTACLE after being stopped this long, seconds"),
    "max_duration_s": (120.0, "abort DEADLINE_EXCEEDED after this long, seconds"),
    "reasoning_period_s": (5.0, "how often the language head is asked about the way ahead, seconds (from the next "
                           "goal)"),
    "max_new_tokens": (24, "reasoning token budget"),
    "infer_timeout_s": (60.0, "longest wait for /oxygen/infer to answer, seconds"),
    "service_wait_s": (1.0, "how long to wait for /oxygen/infer to appear, for nav2 to answer a goal, and for "
                      "each of its answers to a cancel, seconds"),
    "map_frame": ("map", "the frame of targets (REP 105 map); '' in a target's header means it"),
    "odom_frame": ("odom", "the frame of odometry (others are ignored), of the plan, and where the robot drives"),
    "transform_wait_s": (2.0, "how long a goal waits for its map -> odom transform before TF_ERROR, seconds"),
    "transform_tolerance_s": (0.5, "a transform this much older or newer than the odometry still counts, seconds"),
    "nav2": ("auto", f"hand goals to nav2's NavigateToPose: {' | '.join(MODES)} (auto: when a server appears within "
             "nav2_wait_s)"),
    "nav2_action": ("navigate_to_pose", "nav2's NavigateToPose action (bt_navigator)"),
    "nav2_wait_s": (5.0, "how long a goal waits for nav2's server to appear (auto: only within this long of the "
                    "node's start or after nav2 was seen; then the built-in driver if allowed), seconds"),
    "allow_builtin_driver": (False, "without nav2, drive the base with the straight-line controller, only while every "
                             "configured obstacle source is live; false = refuse FAILED_PRECONDITION"),
    "scan_topic": ("scan", "sensor_msgs/LaserScan obstacle source (sensor-data QoS); '' = none"),
    "depth_topic": ("", "depth image obstacle source (sensor_msgs/Image 16UC1 mm or 32FC1 m); '' = none"),
    "depth_info_topic": ("", "the depth image's sensor_msgs/CameraInfo; '' = camera_info beside depth_topic"),
    "base_frame": ("base_link", "the robot's body frame: obstacle points are placed in it through TF, heights measured "
                   "from its origin (base_footprint is on the floor), velocity commands are in it"),
    "robot_radius_m": (0.2, "radius of the circle about base_frame's origin that holds the robot, metres"),
    "obstacle_min_height_m": (0.05, "depth points lower than this above base_frame are floor, not obstacles, metres"),
    "obstacle_max_height_m": (2.0, "depth points higher than this above base_frame are no obstacle, metres"),
    "input_timeout_s": (0.5, "odometry or an obstacle source older than this (by stamp or arrival) stops the base, "
                        "seconds"),
    "obstacle_memory_s": (30.0, "an obstacle point a sensor saw and no later ray of it reaches (out of its view, under "
                          "its minimum range, hidden) stops the base this long after it was seen, where odometry "
                          "puts it, seconds; keep it over blocked_timeout_s; 0 = the newest reading only"),
    "odom_topic": ("odom", "nav_msgs/Odometry input: the robot's pose in odom_frame (others are ignored)"),
    "cmd_vel_topic": ("cmd_vel", "velocity command output (geometry_msgs/TwistStamped, or Twist: cmd_vel_stamped)"),
    "cmd_vel_stamped": (True, "send TwistStamped (Jazzy's diff_drive_controller, nav2); false = Twist (older stacks)"),
    **latest_frame.PARAMETERS,
}
# Read once, at start: refused when set later (read_only). The others are read on every replan, but for the two
# rates (replan_rate_hz, reasoning_period_s), which set a goal's timers when it starts: a set applies from the next.
READ_ONCE = ["service_wait_s", "infer_timeout_s", "map_frame", "odom_frame", "transform_wait_s",
             "transform_tolerance_s", "nav2", "nav2_action", "nav2_wait_s", "odom_topic", "cmd_vel_topic",
             "cmd_vel_stamped", "allow_builtin_driver", "scan_topic", "depth_topic", "depth_info_topic", "base_frame",
             "obstacle_min_height_m", "obstacle_max_height_m", *latest_frame.PARAMETERS]  # fmt: skip
RANGES: Ranges = {
    "replan_rate_hz": (0.0, 100.0),
    "safety_clearance_cm": (0.0, 1000.0),
    "goal_tolerance_m": (0.0, 10.0),
    "max_target_distance_m": (0.0, 1e4),
    "max_linear_mps": (0.0, 10.0),
    "max_angular_rps": (0.0, 20.0),
    "max_decel_mps2": (0.0, 100.0),
    "blocked_timeout_s": (0.0, 3600.0),
    "max_duration_s": (0.0, bounds.GOAL_DURATION_S),
    "reasoning_period_s": (0.0, 3600.0),
    "max_new_tokens": (1, 4096),
    "infer_timeout_s": (0.0, 3600.0),
    "service_wait_s": (0.0, 600.0),
    "transform_wait_s": (0.0, 600.0),
    "transform_tolerance_s": (0.0, 10.0),
    "nav2_wait_s": (0.0, 600.0),
    "robot_radius_m": (0.0, 10.0),
    "obstacle_min_height_m": (-10.0, 10.0),
    "obstacle_max_height_m": (-10.0, 10.0),
    "input_timeout_s": (0.0, 2.0),  # nav2 collision monitor's default source_timeout: older says nothing of a walker
    "obstacle_memory_s": (0.0, 3600.0),
}
# 0 is meaningful for these: exact times, only look for nav2, heights at the base frame's origin, no memory
NON_NEGATIVE = ("transform_tolerance_s", "nav2_wait_s", "obstacle_min_height_m", "obstacle_max_height_m",
                "obstacle_memory_s")
POSITIVE = [name for name in RANGES if name not in NON_NEGATIVE]


def settings_problem(settings: dict[str, Any]) -> str:
    """What is wrong with the read-once string parameters ('' = nothing)."""
    if settings["nav2"] not in MODES:
        return f"parameter nav2 must be one of {', '.join(MODES)}, got {settings['nav2']!r}"
    frames = (settings["map_frame"], settings["odom_frame"])
    if not all(0 < len(frame) <= bounds.ID_CHARS for frame in frames) or frames[0] == frames[1]:
        return f"parameters map_frame and odom_frame must be two different frame ids, got {frames}"
    if not 0 < len(settings["base_frame"]) <= bounds.ID_CHARS:
        return f"parameter base_frame must be a frame id, got {settings['base_frame']!r}"
    if settings["obstacle_min_height_m"] >= settings["obstacle_max_height_m"]:
        return (f"parameters obstacle_min_height_m and obstacle_max_height_m must be a band, got "
                f"{settings['obstacle_min_height_m']} and {settings['obstacle_max_height_m']}")  # fmt: skip
    return ""
