"""format_support_error: every format passes the startup probe wherever its kernels run (here: the torch references
and the Triton kernels, interpreted on CPU or compiled on CUDA)."""

import pytest
import torch

from oxygen_ros.kernels import KVQuantSpec, format_support_error
from oxygen_ros.kernels.gpu_targets import SHARED_MEMORY_PER_BLOCK


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16", "int8", "fp8"])
def test_every_format_round_trips(device, backend, name):
    assert format_support_error(KVQuantSpec.parse(name), device, backend) is None


def test_the_probe_at_the_models_shape_meets_a_gpu_tiles_refusal(monkeypatch, device):
    """The engine probes at its model's shape, so a tile the GPU launchers refuse fails at startup, not at the first
    forward pass: as on an sm_89 GPU (99 KB of shared memory per block), pi0.5's head_dim 256 decodes 16 tokens per
    tile, and a 32-token block does not fit one (kernels/gpu_targets.py); 16-token blocks do."""
    from oxygen_ros.kernels.triton_impl import blocks, paged_decode

    for module in (blocks, paged_decode):
        monkeypatch.setattr(module, "shared_limit", lambda device: SHARED_MEMORY_PER_BLOCK[89])
    pi05 = dict(num_kv_heads=1, head_dim=256, group=8, q_dtype=torch.bfloat16)
    why = format_support_error(KVQuantSpec.parse("int8"), device, "triton", block_size=32, **pi05)
    assert why is not None and "block_size 32 is wider than the 16-token tile" in why, why
    assert format_support_error(KVQuantSpec.parse("int8"), device, "triton", block_size=16, **pi05) is None


def test_a_backend_that_cannot_run_is_reported():
    """The dispatcher's refusal (an unknown backend here; Triton on CPU without the interpreter in the engine test)
    comes back as the reason, not as an exception."""
    why = format_support_error(KVQuantSpec.parse("fp8"), "cpu", backend="cuda-graphs")
    assert why is not None and why.startswith("fp8 KV kernels fail on cpu:") and "cuda-graphs" in why
