"""Triton ``write_kv``: one program per (tile of tokens, kv-head) stores K and V rows, quantizing on the fly; the
tile is the gather kernel's (``gpu_targets.tile_config``: 64 tokens at head_dim 64, fewer at wider heads).

int8 keys (per-channel scales over a block) are written by a second kernel, one program per (token, kv-head): the
first token of each run of tokens going to one block (consecutive in ``slot_mapping`` and in the block) requantizes
that block with the run added, the other programs do nothing, so no two programs write one block."""

import torch
import triton
import triton.language as tl

from ..gpu_targets import tile_config
from ..quant_spec import KVBlocks
from .common import (
    KIND_INT8_CHANNEL, KIND_NONE, channel_scales, load_codes, plane_kinds, quantize_store, quantize_store_block, raw,
    scale_arg,
)


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, slot_ptr, k_cache, v_cache, k_scale, v_scale,
    num_tokens, stride_kt, stride_kh, stride_vt, stride_vh, num_kv_heads, head_dim,
    BLOCK_T: tl.constexpr, D_PAD: tl.constexpr, K_KIND: tl.constexpr, V_KIND: tl.constexpr,
):
    head = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    slots = tl.load(slot_ptr + t, mask=t < num_tokens, other=-1).to(tl.int64)
    valid = slots >= 0
    cols = tl.arange(0, D_PAD)
    mask = valid[:, None] & (cols < head_dim)[None, :]
    if K_KIND != KIND_INT8_CHANNEL:
        k = tl.load(k_ptr + t[:, None] * stride_kt + head * stride_kh + cols[None, :], mask=mask, other=0)
        quantize_store(k, k_cache, k_scale, slots, valid, head, num_kv_heads, cols, head_dim, K_KIND)
    v = tl.load(v_ptr + t[:, None] * stride_vt + head * stride_vh + cols[None, :], mask=mask, other=0)
    quantize_store(v, v_cache, v_scale, slots, valid, head, num_kv_heads, cols, head_dim, V_KIND)


@triton.jit
def _write_key_blocks_kernel(
    k_ptr, slot_ptr, k_cache, k_scale, num_tokens, stride_kt, stride_kh, num_kv_heads, head_dim, block_size,
    BS_PAD: tl.constexpr, D_PAD: tl.constexpr,
):
    t = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    before = tl.load(slot_ptr + t - 1, mask=t > 0, other=-2).to(tl.int64)
    offset = slot % block_size
    if (slot >= 0) & ((offset == 0) | (before != slot - 1)):  # this token starts a run: requantize its block
        step = tl.arange(0, BS_PAD)
        ahead = tl.load(slot_ptr + t + step, mask=t + step < num_tokens, other=-1).to(tl.int64)
        breaks = ((ahead != slot + step) | (offset + step >= block_size)).to(tl.int32)
        length = tl.sum((tl.cumsum(breaks, axis=0) == 0).to(tl.int32), axis=0)
        block = slot // block_size
        rows = tl.arange(0, BS_PAD)
        cols = tl.arange(0, D_PAD)
        kept = rows < offset  # the block's tokens before the run
        old, _ = load_codes(k_cache, k_scale, block * block_size + rows, kept, head, num_kv_heads, cols, head_dim,
                            block_size, KIND_NONE)  # fmt: skip
        old = old * channel_scales(k_scale, block, head, num_kv_heads, cols, head_dim)[None, :]
        new = (rows >= offset) & (rows < offset + length)
        token = t + rows - offset
        x = tl.load(k_ptr + token[:, None] * stride_kt + head * stride_kh + cols[None, :],
                    mask=new[:, None] & (cols < head_dim)[None, :], other=0).to(tl.float32)  # fmt: skip
        quantize_store_block(tl.where(kept[:, None], old, x), k_cache, k_scale, block, rows, rows < block_size, head,
                             num_kv_heads, cols, head_dim, block_size)  # fmt: skip


def write_constants(head_dim: int, storage: torch.dtype) -> tuple[dict[str, int], int]:
    """``_write_kv_kernel``'s constexpr arguments and number of warps: ``tile_config``'s tile."""
    tile = tile_config(head_dim)
    k_kind, v_kind = plane_kinds(storage)
    constants = dict(BLOCK_T=tile.tokens, D_PAD=triton.next_power_of_2(head_dim), K_KIND=k_kind, V_KIND=v_kind)
    return constants, tile.num_warps


def key_block_warps(head_dim: int) -> int:
    """Warps of ``_write_key_blocks_kernel``: one block of keys and its dequantized copy per program (4 warps spill
    at head_dim 256 on sm_86/89)."""
    return 8 if head_dim > 128 else 4


def write_kv(
    blocks: KVBlocks, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor, all_stored: bool = False
) -> None:
    """See ``kernels.write_kv.write_kv``."""
    if blocks.spec.kind == "none":  # float -> float conversion is torch's (exact rounding); the kernel copies
        k, v = k.to(blocks.k.dtype), v.to(blocks.v.dtype)
    k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (k, v))
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    constants, num_warps = write_constants(head_dim, blocks.k.dtype)
    grid = (triton.cdiv(num_tokens, constants["BLOCK_T"]), num_kv_heads)
    _write_kv_kernel[grid](
        k, v, slot_mapping.contiguous(), raw(blocks.k), raw(blocks.v),
        scale_arg(blocks.k_scale, blocks.k), scale_arg(blocks.v_scale, blocks.v),
        num_tokens, k.stride(0), k.stride(1), v.stride(0), v.stride(1), num_kv_heads, head_dim,
        **constants, num_warps=num_warps,
        enable_fp_fusion=False,  # x * inv + 0.5 must round twice, like torch, or int8 codes can differ at ties
    )
    if constants["K_KIND"] == KIND_INT8_CHANNEL.value:
        if not all_stored:  # a skipped token inside a block's run would make its next token a second leader
            stored = slot_mapping >= 0
            slot_mapping, k = slot_mapping[stored], k[stored]
            num_tokens = k.shape[0]
            if num_tokens == 0:
                return
        _write_key_blocks_kernel[(num_tokens, num_kv_heads)](
            k, slot_mapping.contiguous(), blocks.k, blocks.k_scale, num_tokens, k.stride(0), k.stride(1),
            num_kv_heads, head_dim, blocks.block_size, BS_PAD=triton.next_power_of_2(blocks.block_size),
            D_PAD=constants["D_PAD"], num_warps=key_block_warps(head_dim), enable_fp_fusion=False,
        )
