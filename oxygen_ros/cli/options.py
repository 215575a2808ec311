"""Options shared by the client subcommands, kept free of rclpy so `oxygen-ros --help` works without ROS."""

import argparse
import re

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def add_timeout_argument(parser: argparse.ArgumentParser, default: float = 5.0) -> None:
    parser.add_argument(
        "--timeout", type=float, default=default, help=f"seconds to wait for the server to appear (default {default:g})"
    )


def namespace(value: str) -> str:
    """A robot's namespace as ROS writes it (``robot1``, ``/robot1/`` -> ``/robot1``; ``''`` or ``/``: none), or an
    argparse error naming what ROS refuses (a token starting with a digit, an empty token, other characters)."""
    tokens = value.strip().strip("/").split("/")
    if tokens == [""]:
        return ""
    bad = next((t for t in tokens if not _TOKEN.fullmatch(t)), None)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"namespace {value!r}: {bad!r} is not a ROS name token (letters, digits and "
                                         "underscores, not starting with a digit)")  # fmt: skip
    return "/" + "/".join(tokens)


def add_namespace_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", default="", type=namespace, metavar="NS",
        help="the robot's namespace (the launch file's namespace:=): its servers are looked up under it ('' = none)",
    )  # fmt: skip
