"""`oxygen-ros up`: the robot graph of `ros2 launch oxygen_ros oxygen.launch.py use_sim:=true`, a process per node
(but robot_state_publisher, ROS's own), each restarted when it dies (oxygen_ros/supervisor.py). `--preset`,
`--sim-robot` and `--no-autostart` are the launch file's `model_preset:=`, `sim_robot:=` and `autostart:=false`.
Ctrl-C or SIGTERM stops every node cleanly, then exits 0; exit 1 when the inference node cannot come up or a node
keeps dying, 2 for an unknown or invalid preset."""

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from oxygen_ros.simulation import ROBOTS


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run the inference node, the camera and the task nodes, a process each, restarting any that dies "
        "(Ctrl-C to stop)",
    )
    add_graph_arguments(parser)
    parser.add_argument(
        "--autostart",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="configure and activate the inference node after each start (default); --no-autostart leaves it "
        "unconfigured, as the launch file's autostart:=false",
    )
    parser.add_argument(
        "--sim-robot",
        default=ROBOTS[0],
        choices=ROBOTS,
        help="the simulated arm: an SO-100 (default) or a bimanual bi-SO-100, as the launch file's sim_robot:=",
    )
    parser.set_defaults(func=run)


def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="parameter YAML (default: installed oxygen.yaml)")
    parser.add_argument(
        "--preset",
        default="",
        metavar="NAME",
        help="model preset config/models/NAME.yaml: its values replace the config's (--model replaces its model)",
    )
    parser.add_argument("--model", default="", help="override the config's (and the preset's) model")


def preset_values(args: argparse.Namespace) -> dict[str, Any]:
    """The inference node's parameters from ``--preset`` ({} without one); ValueError naming the preset and the
    folder, or the field, when it is unknown or wrong."""
    if not args.preset:
        return {}
    from oxygen_ros.nodes import presets

    return presets.load(args.preset)


def run(args: argparse.Namespace) -> int:
    import yaml

    from oxygen_ros import share, simulation
    from oxygen_ros.supervisor import Supervisor, graph

    try:
        inference = preset_values(args) | ({"model": args.model} if args.model else {})  # explicit beats preset
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # SIGTERM (systemd, docker stop, a test) is Ctrl-C: the same clean shutdown of every node.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:  # `up` runs the simulator (camera_sim), as `demo` does
        config = share.parameter_file(args.config)
        overrides = simulation.parameters(args.sim_robot, yaml.safe_load(config.read_text()))
        overrides["oxygen_inference"] |= inference
        with Supervisor(config, overrides, graph(args.sim_robot), autostart=args.autostart) as nodes:
            running = ", ".join(f"{name} (pid {pid})" for name, pid in nodes.pids().items())
            waiting = "" if args.autostart else "; oxygen_inference is unconfigured (--no-autostart)"
            print(f"oxygen_ros is up: {running}{waiting} (Ctrl-C to stop)", flush=True)
            while not nodes.failed.wait(0.5):  # short waits: the signal is handled between them
                pass
            print(f"error: {nodes.failure}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
