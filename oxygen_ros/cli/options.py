"""Options shared by the client subcommands, kept free of rclpy so `oxygen-ros --help` works without ROS."""

import argparse


def add_timeout_argument(parser: argparse.ArgumentParser, default: float = 5.0) -> None:
    parser.add_argument(
        "--timeout", type=float, default=default, help=f"seconds to wait for the server to appear (default {default:g})"
    )


def add_namespace_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", default="", metavar="NS",
        help="the robot's namespace (the launch file's namespace:=): its servers are looked up under it ('' = none)",
    )  # fmt: skip
