"""Triton ``write_kv``: one program per (tile of tokens, kv-head) stores K and V rows, quantizing on the fly; the
tile is the gather kernel's (``gpu_targets.tile_config``: 64 tokens at head_dim 64, fewer at wider heads)."""

import torch
import triton
import triton.language as tl

from ..gpu_targets import tile_config
from ..quant_spec import KVBlocks
from .common import kind_code, quantize_store, raw, scale_arg


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, slot_ptr, k_cache, v_cache, k_scale, v_scale,
    num_tokens, stride_kt, stride_kh, stride_vt, stride_vh, num_kv_heads, head_dim,
    BLOCK_T: tl.constexpr, D_PAD: tl.constexpr, KIND: tl.constexpr,
):
    head = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    slots = tl.load(slot_ptr + t, mask=t < num_tokens, other=-1).to(tl.int64)
    valid = slots >= 0
    cols = tl.arange(0, D_PAD)
    mask = valid[:, None] & (cols < head_dim)[None, :]
    k = tl.load(k_ptr + t[:, None] * stride_kt + head * stride_kh + cols[None, :], mask=mask, other=0)
    quantize_store(k, k_cache, k_scale, slots, valid, head, num_kv_heads, cols, head_dim, KIND)
    v = tl.load(v_ptr + t[:, None] * stride_vt + head * stride_vh + cols[None, :], mask=mask, other=0)
    quantize_store(v, v_cache, v_scale, slots, valid, head, num_kv_heads, cols, head_dim, KIND)


def write_constants(head_dim: int, kind: int) -> tuple[dict[str, int], int]:
    """``_write_kv_kernel``'s constexpr arguments and number of warps: ``tile_config``'s tile."""
    tile = tile_config(head_dim)
    return dict(BLOCK_T=tile.tokens, D_PAD=triton.next_power_of_2(head_dim), KIND=kind), tile.num_warps


def write_kv(blocks: KVBlocks, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """See ``kernels.write_kv.write_kv``."""
    if blocks.spec.kind == "none":  # float -> float conversion is torch's (exact rounding); the kernel copies
        k, v = k.to(blocks.k.dtype), v.to(blocks.v.dtype)
    k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (k, v))
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    constants, num_warps = write_constants(head_dim, kind_code(blocks.k.dtype))
    grid = (triton.cdiv(num_tokens, constants["BLOCK_T"]), num_kv_heads)
    _write_kv_kernel[grid](
        k, v, slot_mapping.contiguous(), raw(blocks.k), raw(blocks.v),
        scale_arg(blocks.k_scale, blocks.k), scale_arg(blocks.v_scale, blocks.v),
        num_tokens, k.stride(0), k.stride(1), v.stride(0), v.stride(1), num_kv_heads, head_dim,
        **constants, num_warps=num_warps,
        enable_fp_fusion=False,  # x * inv + 0.5 must round twice, like torch, or int8 codes can differ at ties
    )
