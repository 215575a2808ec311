"""Triton whole-block ops: gather (dequantize) and requantize per (block or sequence, kv-head); copy per block."""

import torch
import triton
import triton.language as tl

from ..gpu_targets import tile_config
from ..quant_spec import KVBlocks
from .common import (
    kind_code, load_codes, paged_tile, quantize_store, raw, round_for, scale_arg, shared_limit, tile_shape,
)

COPY_CHUNK = 1024


@triton.jit
def _gather_kernel(
    k_cache, v_cache, k_scale, v_scale, table_ptr, k_out, v_out,
    num_tokens, stride_tb, stride_ob, stride_ot, stride_oh, num_kv_heads, head_dim, block_size,
    D_PAD: tl.constexpr, BS_PAD: tl.constexpr, BLOCKS: tl.constexpr, KIND: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)  # prefix gathers can pass 2^31 output elements
    head = tl.program_id(1)
    cols = tl.arange(0, D_PAD)
    col_mask = cols < head_dim
    out_base = seq * stride_ob + head * stride_oh + cols[None, :]
    for first in range(0, tl.cdiv(num_tokens, block_size), BLOCKS):
        pos, valid, slots = paged_tile(table_ptr + seq * stride_tb, first, num_tokens, block_size, BS_PAD, BLOCKS)
        mask = valid[:, None] & col_mask[None, :]
        k, ks = load_codes(k_cache, k_scale, slots, valid, head, num_kv_heads, cols, head_dim, KIND)
        tl.store(k_out + out_base + pos[:, None] * stride_ot, round_for(k * ks[:, None], k_out), mask=mask)
        v, vs = load_codes(v_cache, v_scale, slots, valid, head, num_kv_heads, cols, head_dim, KIND)
        tl.store(v_out + out_base + pos[:, None] * stride_ot, round_for(v * vs[:, None], v_out), mask=mask)


@triton.jit
def _requantize_kernel(
    src_k, src_v, src_ks, src_vs, dst_k, dst_v, dst_ks, dst_vs, src_ids, dst_ids,
    num_kv_heads, head_dim, block_size,
    D_PAD: tl.constexpr, BS_PAD: tl.constexpr, SRC_KIND: tl.constexpr, DST_KIND: tl.constexpr,
):
    pair = tl.program_id(0)
    head = tl.program_id(1)
    offset = tl.arange(0, BS_PAD)
    valid = offset < block_size
    cols = tl.arange(0, D_PAD)
    src_slots = tl.load(src_ids + pair).to(tl.int64) * block_size + offset
    dst_slots = tl.load(dst_ids + pair).to(tl.int64) * block_size + offset
    k, ks = load_codes(src_k, src_ks, src_slots, valid, head, num_kv_heads, cols, head_dim, SRC_KIND)
    v, vs = load_codes(src_v, src_vs, src_slots, valid, head, num_kv_heads, cols, head_dim, SRC_KIND)
    quantize_store(k * ks[:, None], dst_k, dst_ks, dst_slots, valid, head, num_kv_heads, cols, head_dim, DST_KIND)
    quantize_store(v * vs[:, None], dst_v, dst_vs, dst_slots, valid, head, num_kv_heads, cols, head_dim, DST_KIND)


@triton.jit
def _copy_span(src_ptr, dst_ptr, src_start, dst_start, length, CHUNK: tl.constexpr):
    for first in range(0, length, CHUNK):
        offsets = first + tl.arange(0, CHUNK)
        mask = offsets < length
        tl.store(dst_ptr + dst_start + offsets, tl.load(src_ptr + src_start + offsets, mask=mask), mask=mask)


@triton.jit
def _copy_kernel(
    src_k, src_v, src_ks, src_vs, dst_k, dst_v, dst_ks, dst_vs, src_ids, dst_ids, block_numel, scale_numel,
    CHUNK: tl.constexpr, HAS_TOKEN_SCALES: tl.constexpr,
):
    pair = tl.program_id(0)
    src_block = tl.load(src_ids + pair).to(tl.int64)
    dst_block = tl.load(dst_ids + pair).to(tl.int64)
    _copy_span(src_k, dst_k, src_block * block_numel, dst_block * block_numel, block_numel, CHUNK)
    _copy_span(src_v, dst_v, src_block * block_numel, dst_block * block_numel, block_numel, CHUNK)
    if HAS_TOKEN_SCALES:
        _copy_span(src_ks, dst_ks, src_block * scale_numel, dst_block * scale_numel, scale_numel, CHUNK)
        _copy_span(src_vs, dst_vs, src_block * scale_numel, dst_block * scale_numel, scale_numel, CHUNK)


def gather_constants(head_dim: int, block_size: int, kind: int, limit: int | None) -> tuple[dict[str, int], int]:
    """``_gather_kernel``'s constexpr arguments and number of warps: ``tile_config``'s tile."""
    tile = tile_config(head_dim)
    bs_pad, per_tile = tile_shape(block_size, tile.tokens, limit)
    return dict(D_PAD=triton.next_power_of_2(head_dim), BS_PAD=bs_pad, BLOCKS=per_tile, KIND=kind), tile.num_warps


def requantize_constants(head_dim: int, block_size: int, src_kind: int, dst_kind: int) -> dict[str, int]:
    """``_requantize_kernel``'s constexpr arguments: one block per program."""
    return dict(D_PAD=triton.next_power_of_2(head_dim), BS_PAD=triton.next_power_of_2(block_size), SRC_KIND=src_kind,
                DST_KIND=dst_kind)  # fmt: skip


def gather_kv(
    blocks: KVBlocks, block_tables: torch.Tensor, num_tokens: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``kernels.blocks.gather_kv``."""
    num_seqs = block_tables.shape[0]
    shape = (num_seqs, num_tokens, blocks.num_kv_heads, blocks.head_dim)
    k_out = torch.empty(shape, dtype=dtype, device=blocks.device)
    v_out = torch.empty_like(k_out)
    if num_tokens == 0 or num_seqs == 0:
        return k_out, v_out
    block_tables = block_tables.contiguous()
    constants, num_warps = gather_constants(blocks.head_dim, blocks.block_size, kind_code(blocks.k.dtype),
                                            shared_limit(blocks.device))  # fmt: skip
    _gather_kernel[(num_seqs, blocks.num_kv_heads)](
        raw(blocks.k), raw(blocks.v), scale_arg(blocks.k_scale, blocks.k), scale_arg(blocks.v_scale, blocks.v),
        block_tables, k_out, v_out,
        num_tokens, block_tables.stride(0), k_out.stride(0), k_out.stride(1), k_out.stride(2),
        blocks.num_kv_heads, blocks.head_dim, blocks.block_size, **constants, num_warps=num_warps,
    )
    return k_out, v_out


def requantize_blocks(src: KVBlocks, src_ids: torch.Tensor, dst: KVBlocks, dst_ids: torch.Tensor) -> None:
    """See ``kernels.blocks.requantize_blocks``."""
    if src_ids.numel() == 0:
        return
    _requantize_kernel[(src_ids.numel(), src.num_kv_heads)](
        raw(src.k), raw(src.v), scale_arg(src.k_scale, src.k), scale_arg(src.v_scale, src.v),
        raw(dst.k), raw(dst.v), scale_arg(dst.k_scale, dst.k), scale_arg(dst.v_scale, dst.v),
        src_ids.contiguous(), dst_ids.contiguous(), src.num_kv_heads, src.head_dim, src.block_size,
        **requantize_constants(src.head_dim, src.block_size, kind_code(src.k.dtype), kind_code(dst.k.dtype)),
        enable_fp_fusion=False,  # int8 rounding must match torch's, see write_kv
    )


def copy_blocks(src: KVBlocks, src_ids: torch.Tensor, dst: KVBlocks, dst_ids: torch.Tensor) -> None:
    """See ``kernels.blocks.copy_blocks``."""
    if src_ids.numel() == 0:
        return
    has_token_scales = src.spec.kind == "int8"
    _copy_kernel[(src_ids.numel(),)](
        raw(src.k), raw(src.v), scale_arg(src.k_scale, src.k), scale_arg(src.v_scale, src.v),
        raw(dst.k), raw(dst.v), scale_arg(dst.k_scale, dst.k), scale_arg(dst.v_scale, dst.v),
        src_ids.contiguous(), dst_ids.contiguous(), src.k[0].numel(), src.k_scale[0].numel() if has_token_scales else 0,
        CHUNK=COPY_CHUNK, HAS_TOKEN_SCALES=has_token_scales,
    )
