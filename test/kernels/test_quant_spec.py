"""Formats: config names, validation, and bytes per token (scales included) against the fp16 baseline."""

import dataclasses

import pytest
import torch

from oxygen_ros.kernels import KVBlocks, KVQuantSpec

HEAD_DIM, KV_HEADS = 64, 3


@pytest.mark.parametrize("name,dtype,kind", [
    ("fp16", torch.float16, "none"), ("BF16", torch.bfloat16, "none"), ("float32", torch.float32, "none"),
    ("int8", torch.int8, "int8"), ("fp8", torch.float8_e4m3fn, "fp8"),
])
def test_parse(name, dtype, kind):
    spec = KVQuantSpec.parse(name)
    assert (spec.storage_dtype, spec.kind) == (dtype, kind)


def test_rejects_unknown_formats():
    with pytest.raises(ValueError, match="unknown KV dtype 'int4'"):
        KVQuantSpec.parse("int4")
    with pytest.raises(ValueError, match="unsupported KV storage dtype"):
        KVQuantSpec(torch.float8_e5m2)


@pytest.mark.parametrize("name", ["int8", "fp8"])
def test_quantized_bytes_per_token_at_most_057_of_fp16(name):
    """Measured on allocated storage, so every scale counts (fp8's per-layer scales spread over the pool)."""
    num_blocks, block_size = 32, 16
    tokens = num_blocks * block_size

    def bytes_per_token(spec: KVQuantSpec) -> float:
        return KVBlocks.allocate(spec, num_blocks, block_size, KV_HEADS, HEAD_DIM).nbytes / tokens

    fp16, quantized = KVQuantSpec.parse("fp16"), KVQuantSpec.parse(name)
    ratio = bytes_per_token(quantized) / bytes_per_token(fp16)
    assert ratio <= 0.57
    # The per-block figure pools use for budgets agrees with the allocation (fp8 scales amortized away).
    per_token = quantized.block_bytes(block_size, KV_HEADS, HEAD_DIM) / block_size
    assert per_token <= bytes_per_token(quantized) <= per_token + 2 * KV_HEADS * 4 / tokens
    assert per_token <= 0.57 * fp16.block_bytes(block_size, KV_HEADS, HEAD_DIM) / block_size


def test_blocks_validate_scales():
    blocks = KVBlocks.allocate(KVQuantSpec.parse("int8"), 2, 16, KV_HEADS, HEAD_DIM)
    with pytest.raises(ValueError, match="k_scale of shape"):
        dataclasses.replace(blocks, k_scale=torch.ones(KV_HEADS))
    with pytest.raises(ValueError, match="bfloat16 k_scale"):  # per-token fp32 key scales are the old layout
        dataclasses.replace(blocks, k_scale=torch.ones(2, 16, KV_HEADS))
    with pytest.raises(ValueError, match="has no scales"):
        KVBlocks(torch.zeros(2, 16, 3, 64), torch.zeros(2, 16, 3, 64), torch.ones(3), None)
