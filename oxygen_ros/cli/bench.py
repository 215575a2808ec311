"""`oxygen-ros bench --suite NAME --json FILE`: run a benchmark suite, print its metrics, write the full result."""

import argparse
import importlib
import inspect
import json
import sys
from pathlib import Path

SUITES = {
    "causal": "oxygen_ros.bench.causal_suite",
    "device": "oxygen_ros.bench.device_suite",
    "engine": "oxygen_ros.bench.engine_suite",
    "kernels": "oxygen_ros.bench.kernel_suite",
    "multitask": "oxygen_ros.bench.multitask_suite",
    "pacing": "oxygen_ros.bench.pacing_suite",
    "paper": "oxygen_ros.bench.paper_suite",
    "peers": "oxygen_ros.bench.peers_suite",
    "quant": "oxygen_ros.bench.quant_suite",
    "robot": "oxygen_ros.bench.robot_suite",
    "structured": "oxygen_ros.bench.structured_suite",
    "tiers": "oxygen_ros.bench.tiers_suite",
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="measure ours vs a baseline side by side (see docs/benchmarks.md)")
    parser.add_argument("--suite", choices=sorted(SUITES), required=True)
    parser.add_argument("--json", type=Path, help="write the whole result (metrics, details, environment) here")
    parser.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="override a suite parameter (int/float/str)"
    )
    parser.set_defaults(func=run)


def _parse(pairs: list[str]) -> dict[str, object]:
    params: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--param wants NAME=VALUE, got {pair!r}")
        for cast in (int, float):
            try:
                params[name] = cast(value)
                break
            except ValueError:
                continue
        else:
            params[name] = value
    return params


def run(args: argparse.Namespace) -> int:
    suite = importlib.import_module(SUITES[args.suite])
    params = _parse(args.param)
    try:
        # the fields of a suite's settings dataclass (PARAMS) where its run takes **params; a TypeError raised
        # inside the run is then the suite's own bug, never reported as a bad --param
        inspect.signature(getattr(suite, "PARAMS", suite.run)).bind(**params)
    except TypeError as exc:
        print(f"error: bad --param for suite {args.suite}: {exc}", file=sys.stderr)
        return 2
    out = suite.run(**params)
    for name, value in out["metrics"].items():
        print(f"{name:<32} {value:.4g}" if isinstance(value, float) else f"{name:<32} {value}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
