"""The kernel micro-benchmark on CPU (torch reference vs SDPA, tiny sizes), the GPU check's refusal without CUDA, and
the bench CLI's suite table."""

import importlib
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from oxygen_ros.bench import kernel_suite
from oxygen_ros.cli.bench import SUITES
from oxygen_ros.cli.main import build_parser

REPO = Path(__file__).parents[2]


def test_microbench_matches_sdpa_for_every_format():
    out = kernel_suite.run(num_seqs=2, context=40, num_heads=4, num_kv_heads=2, head_dim=64, repeats=2)
    for name in ("fp16", "bf16", "int8", "fp8"):
        ratio = out["metrics"][f"{name}_time_ratio_vs_sdpa"]
        assert math.isfinite(ratio) and ratio > 0
        assert out["metrics"][f"{name}_max_abs_error"] < (1e-4 if out["params"]["device"] == "cpu" else 2e-2)
    details = out["details"]
    assert details["int8"]["kv_bytes"] < 0.57 * details["fp16"]["kv_bytes"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the whole check")
def test_gpu_check_says_it_needs_cuda_and_fails_fast():
    env = {**os.environ, "PYTHON": sys.executable}
    out = subprocess.run([str(REPO / "scripts" / "gpu_check.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "needs a CUDA GPU (nothing was run)" in out.stderr


@pytest.mark.parametrize("suite", ["quant", "kernels"])
def test_bench_cli_knows_the_suite(suite):
    assert build_parser().parse_args(["bench", "--suite", suite]).suite == suite
    assert callable(importlib.import_module(SUITES[suite]).run)
