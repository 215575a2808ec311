"""Common shape of a benchmark result, so docs/benchmarks.md and CI read every suite the same way."""

import platform
import sys
import time
from typing import Any

import torch


def environment() -> dict[str, Any]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else f"cpu ({torch.get_num_threads()} threads)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def result(suite: str, metrics: dict[str, Any], details: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    return {
        "suite": suite,
        "command": "oxygen-ros " + " ".join(sys.argv[1:]),
        "params": params,
        "environment": environment(),
        "metrics": metrics,
        "details": details,
    }
