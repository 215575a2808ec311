"""`bench --suite device` (what scripts/gpu_check.sh times on a GPU) on CPU at tiny sizes: a pi0.5 action chunk's
latency and a batched decode at SmolLM2's layer shape, from random weights and the suite's own byte-level tokenizer,
so the GPU machine needs nothing but the repository."""

import json
import math

import pytest

from oxygen_ros.bench import device_suite
from oxygen_ros.cli.main import build_parser


def test_the_byte_tokenizer_round_trips_any_text_and_stops_on_its_eos():
    tokenizer = device_suite.byte_tokenizer()
    text = "Pick up the red cup, then say ‘done’ — 完成."
    ids = tokenizer.encode(text)
    assert len(ids) == len(text.encode()) and tokenizer.decode(ids) == text
    assert tokenizer.eos_token_id == 256 and tokenizer.decode([*ids[:4], 40000]) == text[:4]  # unknown ids: nothing


@pytest.mark.slow
def test_the_device_suite_times_chunks_and_every_batch_size():
    out = device_suite.run(model="pi05-random-tiny", chunks=2, images=1, layers=2, batches="1,3", prompt_tokens=24,
                           new_tokens=5, kv_mib=64)  # fmt: skip
    metrics = out["metrics"]
    assert metrics["device"] == "cpu" and metrics["dtype"] == "float32"
    assert 0 < metrics["chunk_latency_ms_median"] <= metrics["chunk_latency_ms_max"] < 60_000
    assert math.isclose(metrics["chunk_hz"], 1e3 / metrics["chunk_latency_ms_median"])
    for size in (1, 3):
        assert metrics[f"decode_tokens_per_s_b{size}"] > 0
    assert json.loads(json.dumps(out))["metrics"] == metrics  # what `bench --json` writes
    assert out["params"]["layers"] == 2 and build_parser().parse_args(["bench", "--suite", "device"]).suite == "device"


@pytest.mark.slow
def test_the_gpu_path_bf16_through_the_triton_kernels_runs_on_cpu_first():
    """What the suite runs on a GPU (bf16 compute and KV, the Triton kernels) had never run before a GPU was lent:
    here the same path, interpreted (TRITON_INTERPRET=1), gives a chunk of finite actions and decodes."""
    out = device_suite.run(model="pi05-random-tiny", chunks=1, images=1, layers=1, batches="2", prompt_tokens=20,
                           new_tokens=3, kv_mib=16, dtype="bfloat16", kernel_backend="triton")  # fmt: skip
    metrics = out["metrics"]
    assert metrics["dtype"] == "bfloat16" and out["params"]["kernel_backend"] == "triton"
    assert json.loads(json.dumps(out))["params"]["dtype"] == "bfloat16"  # what `bench --json` writes
    assert metrics["chunk_latency_ms_median"] > 0 and metrics["decode_tokens_per_s_b2"] > 0
