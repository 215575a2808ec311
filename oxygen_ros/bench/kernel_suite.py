"""`bench --suite kernels`: paged decode attention per KV format vs torch SDPA on the same K/V gathered contiguous.

The peer is the best a contiguous cache gets: ``scaled_dot_product_attention`` over K/V that already sit dense in the
compute dtype ([B, kvh, L, d], GQA), with no gather and no dequantization in its timing.  Ours reads the paged,
possibly quantized pool through block tables and dequantizes inside the kernel: compiled Triton on CUDA, the torch
reference on CPU (so the CPU numbers measure the reference path, not a kernel).  ``<fmt>_time_ratio_vs_sdpa`` is
ours / SDPA (below 1: faster); ``<fmt>_max_abs_error`` is ours vs SDPA over the dequantized K/V, which separates the
kernel's own error from the format's rounding.  Block tables are shuffled so blocks are scattered over the pool.
"""

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from oxygen_ros.bench.report import result
from oxygen_ros.kernels import KVBlocks, KVQuantSpec, gather_kv, paged_decode_attention, write_kv
from oxygen_ros.kernels.quant_spec import FP8_MAX

# Llama-8B-like decode batch on a GPU; a small one for the CPU reference path.
PRESETS = {
    "cuda": {"num_seqs": 32, "context": 2048, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128},
    "cpu": {"num_seqs": 4, "context": 256, "num_heads": 8, "num_kv_heads": 2, "head_dim": 64},
}


def run(
    dtypes: str = "fp16,bf16,int8,fp8", num_seqs: int = 0, context: int = 0, num_heads: int = 0,
    num_kv_heads: int = 0, head_dim: int = 0, block_size: int = 16, repeats: int = 0,
) -> dict[str, Any]:
    """Zero sizes take the device's preset; ``repeats`` 0 = 50 timed calls on CUDA, 20 on CPU."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    given = {"num_seqs": num_seqs, "context": context, "num_heads": num_heads, "num_kv_heads": num_kv_heads,
             "head_dim": head_dim}
    shape = {k: v or PRESETS[device.type][k] for k, v in given.items()}
    repeats = repeats or (50 if device.type == "cuda" else 20)
    metrics: dict[str, Any] = {}
    details: dict[str, Any] = {}
    for name in dtypes.split(","):
        row = _measure(KVQuantSpec.parse(name), device, block_size, repeats, **shape)
        metrics[f"{name}_time_ratio_vs_sdpa"] = row["ours_ms"] / row["sdpa_ms"]
        metrics[f"{name}_max_abs_error"] = row["max_abs_error"]
        details[name] = row
        print(f"kernels: {name} ours {row['ours_ms']:.3f} ms, sdpa {row['sdpa_ms']:.3f} ms, max abs error "
              f"{row['max_abs_error']:.2e}", flush=True)  # as measured: a later format's failure keeps this one
    params = {**shape, "dtypes": dtypes, "block_size": block_size, "repeats": repeats, "device": device.type,
              "backend": "triton" if device.type == "cuda" else "torch reference"}
    return result("kernels", metrics, details, params)


def _measure(
    spec: KVQuantSpec, device: torch.device, block_size: int, repeats: int,
    num_seqs: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int,
) -> dict[str, float]:
    """One format: fill a scattered pool, time both paths, compare outputs."""
    gen = torch.Generator().manual_seed(0)
    per_seq = -(-context // block_size)
    blocks = KVBlocks.allocate(spec, num_seqs * per_seq, block_size, num_kv_heads, head_dim, device)
    tables = torch.randperm(num_seqs * per_seq, generator=gen).view(num_seqs, per_seq).to(device, torch.int32)
    k, v = (torch.randn(num_seqs * context, num_kv_heads, head_dim, generator=gen).to(device) for _ in range(2))
    if spec.kind == "fp8":  # per-head scales fitted to the data with the calibrator's 2x headroom
        blocks.k_scale.copy_(k.abs().amax(dim=(0, 2)) * 2 / FP8_MAX)
        blocks.v_scale.copy_(v.abs().amax(dim=(0, 2)) * 2 / FP8_MAX)
    pos = torch.arange(context, device=device)
    slots = (tables.long()[:, pos // block_size] * block_size + pos % block_size).flatten()
    write_kv(blocks, slots, k, v)

    # the engine's compute dtype on a GPU (dtype auto: bf16) over every pool but fp16's, whose model runs in fp16
    compute_dtype = torch.float16 if spec.storage_dtype == torch.float16 else torch.bfloat16
    if device.type == "cpu":
        compute_dtype = torch.float32  # CPU half-precision SDPA is slow and not what the engine runs there
    q = torch.randn(num_seqs, num_heads, head_dim, generator=gen).to(device, compute_dtype)
    lens = torch.full((num_seqs,), context, dtype=torch.int32, device=device)
    keys, values = (x.transpose(1, 2).contiguous() for x in gather_kv(blocks, tables, context, compute_dtype))
    scale = head_dim**-0.5

    def ours() -> torch.Tensor:
        return paged_decode_attention(q, blocks, tables, lens, scale)

    def sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q[:, :, None], keys, values, scale=scale, enable_gqa=True)[:, :, 0]

    error = (ours().float() - sdpa().float()).abs().max().item()
    ours_ms, sdpa_ms = _time_ms(ours, repeats, device), _time_ms(sdpa, repeats, device)
    kv_bytes = blocks.nbytes  # codes and scales: what one call reads
    return {"ours_ms": ours_ms, "sdpa_ms": sdpa_ms, "max_abs_error": error, "kv_bytes": kv_bytes,
            "ours_gb_per_s": kv_bytes / ours_ms / 1e6}


def _time_ms(fn: Callable[[], torch.Tensor], repeats: int, device: torch.device) -> float:
    """Mean milliseconds per call after warm-up calls (Triton compiles on the first), the device synchronized."""
    for _ in range(3):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / repeats * 1e3
