"""`oxygen-ros navigate --x X --y Y [--yaw RAD] [--instruction "..."]`: drive to a pose in the map frame through the
running graph's /navigate action, printing the distance left and the planner's reasoning; Ctrl-C cancels the goal."""

import argparse
import math


def register(subparsers) -> None:
    from oxygen_ros.cli.options import add_namespace_argument, add_timeout_argument

    parser = subparsers.add_parser("navigate", help="drive to a pose (map frame) with language reasoning")
    parser.add_argument("--x", type=float, required=True, help="target x in metres (map frame)")
    parser.add_argument("--y", type=float, required=True, help="target y in metres (map frame)")
    parser.add_argument(
        "--yaw",
        type=float,
        default=0.0,
        help="target heading in radians (sent in the goal's pose; navigation_node reaches the position only)",
    )
    parser.add_argument("--instruction", default="", help="optional hint, e.g. 'pass left of the table'")
    add_timeout_argument(parser)
    add_namespace_argument(parser)
    parser.set_defaults(func=run)


def _line(feedback, elapsed_s: float, count: int) -> str:
    cmd = feedback.cmd
    return (
        f"{feedback.distance_remaining:6.2f} m to go, v {cmd.linear.x:+.2f} m/s, w {cmd.angular.z:+.2f} rad/s  "
        f"{feedback.reasoning.strip()}"
    )


def navigate_goal(x: float, y: float, yaw: float = 0.0, instruction: str = ""):
    """The /navigate goal for a pose in the map frame (metres, radians); `oxygen-ros demo` sends it too."""
    from geometry_msgs.msg import PoseStamped

    from oxygen_ros.action import Navigate

    target = PoseStamped()
    target.header.frame_id = "map"
    target.pose.position.x, target.pose.position.y = x, y
    target.pose.orientation.z, target.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    return Navigate.Goal(target=target, instruction=instruction)


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.action import Navigate
    from oxygen_ros.cli.client import FeedbackPrinter, run_client, run_goal

    goal = navigate_goal(args.x, args.y, args.yaw, args.instruction)
    feedback = FeedbackPrinter(lambda f: f.reasoning, _line)

    def summary(result) -> str:
        return f"{result.distance_remaining:.2f} m from the target"

    return run_client(
        "oxygen_navigate",
        lambda c: run_goal(c, Navigate, "navigate", goal, args.timeout, feedback, summary, "--x, --y and --yaw"),
        args.namespace,
    )
