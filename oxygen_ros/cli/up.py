"""`oxygen-ros up`: the robot graph of `ros2 launch oxygen_ros oxygen.launch.py`, here, in one process."""

import argparse
import sys
import time
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("up", help="bring up the inference node and the camera (Ctrl-C to stop)")
    add_graph_arguments(parser)
    parser.set_defaults(func=run)


def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="parameter YAML (default: installed oxygen.yaml)")
    parser.add_argument("--model", default="", help="override the config's model")


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.bringup import Graph

    try:
        with Graph(args.config, args.model):
            print("oxygen_ros is up: /oxygen/infer, /oxygen/get_pool_stats, /oxygen/pool_* (Ctrl-C to stop)")
            while True:
                time.sleep(1.0)
    except KeyboardInterrupt:
        return 0
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
