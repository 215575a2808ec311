"""`oxygen-ros up`: the robot graph of `ros2 launch oxygen_ros oxygen.launch.py`, a process per node, each restarted
when it dies (oxygen_ros/supervisor.py). Ctrl-C or SIGTERM stops every node cleanly, then exits 0; exit 1 when the
inference node cannot come up or a node keeps dying."""

import argparse
import signal
import sys
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run the inference node, the camera and the task nodes, a process each, restarting any that dies "
        "(Ctrl-C to stop)",
    )
    add_graph_arguments(parser)
    parser.set_defaults(func=run)


def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="parameter YAML (default: installed oxygen.yaml)")
    parser.add_argument("--model", default="", help="override the config's model")


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.supervisor import Supervisor

    # SIGTERM (systemd, docker stop, a test) is Ctrl-C: the same clean shutdown of every node.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    overrides = {"oxygen_inference": {"model": args.model}} if args.model else None
    try:
        with Supervisor(args.config, overrides) as graph:
            nodes = ", ".join(f"{name} (pid {pid})" for name, pid in graph.pids().items())
            print(f"oxygen_ros is up: {nodes} (Ctrl-C to stop)", flush=True)
            while not graph.failed.wait(0.5):  # short waits: the signal is handled between them
                pass
            print(f"error: {graph.failure}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
