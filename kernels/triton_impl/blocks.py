"""Triton whole-block ops: gather (dequantize) and requantize per (block or sequence, kv-head); copy per block."""

import torch
import triton
import triton.language as tl

from ..gpu_targets import tile_config
from ..quant_spec import KVBlocks
from .common import (
    KIND_INT8_CHANNEL, KIND_NONE, channel_scales, load_codes, paged_tile, plane_kinds, quantize_store,
    quantize_store_block, raw, round_for, scale_arg, shared_limit, tile_shape,
)

COPY_CHUNK = 1024


@triton.jit(do_not_specialize=["num_tokens", "stride_tb"])  # prefix lengths and table widths vary
def _gather_kernel(
    k_cache, v_cache, k_scale, v_scale, table_ptr, k_out, v_out,
    num_tokens, stride_tb, stride_ob, stride_ot, stride_oh, num_kv_heads, head_dim, block_size,
    D_PAD: tl.constexpr, BS_PAD: tl.constexpr, BLOCKS: tl.constexpr, K_KIND: tl.constexpr, V_KIND: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)  # prefix gathers can pass 2^31 output elements
    head = tl.program_id(1)
    cols = tl.arange(0, D_PAD)
    col_mask = cols < head_dim
    out_base = seq * stride_ob + head * stride_oh + cols[None, :]
    for first in range(0, tl.cdiv(num_tokens, block_size), BLOCKS):
        pos, valid, slots = paged_tile(table_ptr + seq * stride_tb, first, num_tokens, block_size, BS_PAD, BLOCKS)
        mask = valid[:, None] & col_mask[None, :]
        k, ks = load_codes(k_cache, k_scale, slots, valid, head, num_kv_heads, cols, head_dim, block_size, K_KIND)
        tl.store(k_out + out_base + pos[:, None] * stride_ot, round_for(k * ks[:, None], k_out), mask=mask)
        v, vs = load_codes(v_cache, v_scale, slots, valid, head, num_kv_heads, cols, head_dim, block_size, V_KIND)
        tl.store(v_out + out_base + pos[:, None] * stride_ot, round_for(v * vs[:, None], v_out), mask=mask)


@triton.jit
def _requantize_kernel(
    src_k, src_v, src_ks, src_vs, dst_k, dst_v, dst_ks, dst_vs, src_ids, dst_ids,
    num_kv_heads, head_dim, block_size,
    D_PAD: tl.constexpr, BS_PAD: tl.constexpr, SRC_K_KIND: tl.constexpr, SRC_V_KIND: tl.constexpr,
    DST_K_KIND: tl.constexpr, DST_V_KIND: tl.constexpr,
):
    pair = tl.program_id(0)
    head = tl.program_id(1)
    offset = tl.arange(0, BS_PAD)
    valid = offset < block_size
    cols = tl.arange(0, D_PAD)
    src_block = tl.load(src_ids + pair).to(tl.int64)
    dst_block = tl.load(dst_ids + pair).to(tl.int64)
    src_slots = src_block * block_size + offset
    dst_slots = dst_block * block_size + offset
    if SRC_K_KIND == KIND_INT8_CHANNEL:  # the block's channel scales, loaded once
        k, ks = load_codes(src_k, src_ks, src_slots, valid, head, num_kv_heads, cols, head_dim, block_size, KIND_NONE)
        k = k * channel_scales(src_ks, src_block, head, num_kv_heads, cols, head_dim)[None, :]
    else:
        k, ks = load_codes(src_k, src_ks, src_slots, valid, head, num_kv_heads, cols, head_dim, block_size,
                           SRC_K_KIND)  # fmt: skip
    v, vs = load_codes(src_v, src_vs, src_slots, valid, head, num_kv_heads, cols, head_dim, block_size, SRC_V_KIND)
    if DST_K_KIND == KIND_INT8_CHANNEL:
        quantize_store_block(k * ks[:, None], dst_k, dst_ks, dst_block, offset, valid, head, num_kv_heads, cols,
                             head_dim, block_size)  # fmt: skip
    else:
        quantize_store(k * ks[:, None], dst_k, dst_ks, dst_slots, valid, head, num_kv_heads, cols, head_dim,
                       DST_K_KIND)  # fmt: skip
    quantize_store(v * vs[:, None], dst_v, dst_vs, dst_slots, valid, head, num_kv_heads, cols, head_dim, DST_V_KIND)


@triton.jit
def _copy_span(src_ptr, dst_ptr, src_start, dst_start, length, CHUNK: tl.constexpr):
    for first in range(0, length, CHUNK):
        offsets = first + tl.arange(0, CHUNK)
        mask = offsets < length
        tl.store(dst_ptr + dst_start + offsets, tl.load(src_ptr + src_start + offsets, mask=mask), mask=mask)


@triton.jit
def _copy_kernel(
    src_k, src_v, src_ks, src_vs, dst_k, dst_v, dst_ks, dst_vs, src_ids, dst_ids, block_numel, k_scale_numel,
    v_scale_numel, CHUNK: tl.constexpr, HAS_BLOCK_SCALES: tl.constexpr,
):
    pair = tl.program_id(0)
    src_block = tl.load(src_ids + pair).to(tl.int64)
    dst_block = tl.load(dst_ids + pair).to(tl.int64)
    _copy_span(src_k, dst_k, src_block * block_numel, dst_block * block_numel, block_numel, CHUNK)
    _copy_span(src_v, dst_v, src_block * block_numel, dst_block * block_numel, block_numel, CHUNK)
    if HAS_BLOCK_SCALES:
        _copy_span(src_ks, dst_ks, src_block * k_scale_numel, dst_block * k_scale_numel, k_scale_numel, CHUNK)
        _copy_span(src_vs, dst_vs, src_block * v_scale_numel, dst_block * v_scale_numel, v_scale_numel, CHUNK)


def gather_constants(
    head_dim: int, block_size: int, storage: torch.dtype, limit: int | None
) -> tuple[dict[str, int], int]:
    """``_gather_kernel``'s constexpr arguments and number of warps: ``tile_config``'s tile."""
    tile = tile_config(head_dim)
    bs_pad, per_tile = tile_shape(block_size, tile.tokens, limit)
    k_kind, v_kind = plane_kinds(storage)
    constants = dict(D_PAD=triton.next_power_of_2(head_dim), BS_PAD=bs_pad, BLOCKS=per_tile, K_KIND=k_kind,
                     V_KIND=v_kind)  # fmt: skip
    return constants, tile.num_warps


def requantize_constants(head_dim: int, block_size: int, src: torch.dtype, dst: torch.dtype) -> dict[str, int]:
    """``_requantize_kernel``'s constexpr arguments: one block per program."""
    (src_k, src_v), (dst_k, dst_v) = plane_kinds(src), plane_kinds(dst)
    return dict(D_PAD=triton.next_power_of_2(head_dim), BS_PAD=triton.next_power_of_2(block_size), SRC_K_KIND=src_k,
                SRC_V_KIND=src_v, DST_K_KIND=dst_k, DST_V_KIND=dst_v)  # fmt: skip


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
    constants, num_warps = gather_constants(blocks.head_dim, blocks.block_size, blocks.k.dtype,
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
        **requantize_constants(src.head_dim, src.block_size, src.k.dtype, dst.k.dtype),
        enable_fp_fusion=False,  # int8 rounding must match torch's, see write_kv
    )


def copy_blocks(src: KVBlocks, src_ids: torch.Tensor, dst: KVBlocks, dst_ids: torch.Tensor) -> None:
    """See ``kernels.blocks.copy_blocks``."""
    if src_ids.numel() == 0:
        return
    per_block = src.spec.kind == "int8"  # fp8's per-head scales belong to the layer
    _copy_kernel[(src_ids.numel(),)](
        raw(src.k), raw(src.v), scale_arg(src.k_scale, src.k), scale_arg(src.v_scale, src.v),
        raw(dst.k), raw(dst.v), scale_arg(dst.k_scale, dst.k), scale_arg(dst.v_scale, dst.v),
        src_ids.contiguous(), dst_ids.contiguous(), src.k[0].numel(), src.k_scale[0].numel() if per_block else 0,
        src.v_scale[0].numel() if per_block else 0, CHUNK=COPY_CHUNK, HAS_BLOCK_SCALES=per_block,
    )
