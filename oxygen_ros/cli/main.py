"""Entry point of `oxygen-ros`: builds the parser from the subcommand modules and dispatches."""

import argparse
import importlib

SUBCOMMANDS = ("up", "ask", "instruct", "navigate", "stats", "demo", "generate", "bench", "version")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-ros", description="oxygen_ros: one inference node for all robot tasks"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"oxygen_ros.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
