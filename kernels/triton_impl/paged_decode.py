"""Triton paged decode attention: one program per (sequence, kv-head), online softmax over tiles of whole blocks.

Each program holds its kv-head's query heads as one tile (padded to 16 rows, the smallest ``tl.dot`` on GPUs) and
streams the sequence's blocks through the table a tile of whole blocks at a time (``gpu_targets.decode_tile``).
Dequantization is folded into the math: codes go into the dots as they are (``dot_precision``: tf32 for bf16
queries) and the per-token scales multiply score columns (K) and probability columns (V), so a scale costs one
multiply per token instead of one per element. int8 keys' per-channel scales multiply the queries where a tile is
one block (head_dim 256), else the key tile.

``RETURN_LSE``: each program also writes, per query head, the log-sum-exp of the scores of the whole sequence
(merging partial attentions); with ``BLOCK_LSE`` also that of every block, for the block mass.  A block's softmax
mass for that head is ``exp(block_lse - lse)``; this is independent of the running maximum, so it needs no second
pass over the keys.  The host sums it over heads (or keeps the heads apart when asked).
"""

import torch
import triton
import triton.language as tl

from ..gpu_targets import MAX_REGISTERS, decode_tile, padded_group, padded_head_dim
from ..quant_spec import KVBlocks
from .common import (
    KIND_INT8_CHANNEL, KIND_NONE, channel_scales, load_codes, paged_tile, plane_kinds, raw, round_for, scale_arg,
    shared_limit, tile_shape,
)


@triton.jit(do_not_specialize=["stride_tb", "max_blocks"])  # the table's width changes as contexts grow: one build
def _paged_decode_kernel(
    q_ptr, k_cache, v_cache, k_scale, v_scale, table_ptr, context_ptr, out_ptr, lse_ptr, block_lse_ptr,
    sm_scale, stride_qb, stride_qh, stride_tb, stride_ob, stride_oh,
    num_heads, num_kv_heads, head_dim, block_size, max_blocks,
    GROUP: tl.constexpr, G_PAD: tl.constexpr, D_PAD: tl.constexpr, BS_PAD: tl.constexpr, BLOCKS: tl.constexpr,
    K_KIND: tl.constexpr, V_KIND: tl.constexpr, RETURN_LSE: tl.constexpr, BLOCK_LSE: tl.constexpr,
    DOT: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    context = tl.load(context_ptr + seq)
    g = tl.arange(0, G_PAD)
    heads = kv_head * GROUP + g
    head_mask = g < GROUP
    cols = tl.arange(0, D_PAD)
    col_mask = cols < head_dim
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + cols[None, :],
                mask=head_mask[:, None] & col_mask[None, :], other=0.0).to(tl.float32)

    m = tl.full([G_PAD], float("-inf"), tl.float32)
    denom = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D_PAD], tl.float32)
    num_blocks = tl.cdiv(context, block_size)
    table_row = table_ptr + seq * stride_tb
    for first in range(0, num_blocks, BLOCKS):
        _, valid, slots = paged_tile(table_row, first, context, block_size, BS_PAD, BLOCKS)
        if K_KIND == KIND_INT8_CHANNEL and BLOCKS == 1:  # one block per tile: its channel scales go on q
            k, ks = load_codes(k_cache, k_scale, slots, valid, kv_head, num_kv_heads, cols, head_dim, block_size,
                               KIND_NONE)  # fmt: skip
            block = tl.load(table_row + first).to(tl.int64)
            q_tile = q * channel_scales(k_scale, block, kv_head, num_kv_heads, cols, head_dim)[None, :]
        else:
            k, ks = load_codes(k_cache, k_scale, slots, valid, kv_head, num_kv_heads, cols, head_dim, block_size,
                               K_KIND)  # fmt: skip
            q_tile = q
        v, vs = load_codes(v_cache, v_scale, slots, valid, kv_head, num_kv_heads, cols, head_dim, block_size, V_KIND)
        s = tl.dot(q_tile, tl.trans(k), input_precision=DOT) * (ks * sm_scale)[None, :]
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p * vs[None, :], v, input_precision=DOT)
        m = m_new
        if BLOCK_LSE:
            entries = first + tl.arange(0, BLOCKS)
            block_sum = tl.sum(tl.reshape(p, [G_PAD, BLOCKS, BS_PAD]), axis=2)
            block_lse = m_new[:, None] + tl.log(tl.maximum(block_sum, 1e-30))
            tl.store(block_lse_ptr + (seq * num_heads + heads)[:, None] * max_blocks + entries[None, :], block_lse,
                     mask=head_mask[:, None] & (entries < num_blocks)[None, :])

    out = acc / denom[:, None]
    tl.store(out_ptr + seq * stride_ob + heads[:, None] * stride_oh + cols[None, :], round_for(out, out_ptr),
             mask=head_mask[:, None] & col_mask[None, :])
    if RETURN_LSE:
        tl.store(lse_ptr + seq * num_heads + heads, m + tl.log(denom), mask=head_mask)


def dot_precision(q_dtype: torch.dtype, storage: torch.dtype) -> str:
    """``tf32`` for bf16 queries over 16-bit, fp8 or int8 codes (tensor cores, a third of the registers, no spill;
    on an H100 4.3x faster at 128-wide heads than fp32 dots, docs/benchmarks.md); ``ieee`` otherwise. A tf32 dot
    truncates an fp32 operand to 11 significant bits: the probabilities, which moves the output less than the bf16
    rounding the kernel applies to it anyway, and int8 keys times their bf16 channel scales (or the queries times
    them, where a tile is one block), each product by under a quarter of the int8 rounding's bound
    (test_dot_precision). An fp16 output is rounded 8x finer, so fp16 queries keep ieee; so do fp32 queries and
    pools."""
    return "tf32" if q_dtype == torch.bfloat16 and storage.itemsize <= 2 else "ieee"


def decode_constants(
    group: int, head_dim: int, block_size: int, storage: torch.dtype, dot: str, return_lse: bool, block_lse: bool,
    limit: int | None,
) -> dict[str, int | bool | str]:
    """The kernel's constexpr arguments and launch options for a pool and a device's shared memory ``limit``: the
    tile of ``gpu_targets.decode_tile``."""
    tile = decode_tile(head_dim, group, dot, limit)
    bs_pad, per_tile = tile_shape(block_size, tile.tokens, limit)
    k_kind, v_kind = plane_kinds(storage)
    return dict(GROUP=group, G_PAD=padded_group(group), D_PAD=padded_head_dim(head_dim), BS_PAD=bs_pad,
                BLOCKS=per_tile, K_KIND=k_kind, V_KIND=v_kind, RETURN_LSE=return_lse, BLOCK_LSE=block_lse, DOT=dot,
                num_warps=tile.num_warps, num_stages=tile.num_stages, maxnreg=MAX_REGISTERS)  # fmt: skip


def paged_decode_attention(
    q: torch.Tensor, blocks: KVBlocks, block_tables: torch.Tensor, context_lens: torch.Tensor, sm_scale: float,
    block_mass: torch.Tensor | None = None, lse: torch.Tensor | None = None,
) -> torch.Tensor:
    """See ``kernels.paged_decode.paged_decode_attention``."""
    q = q if q.stride(-1) == 1 else q.contiguous()
    block_tables = block_tables.contiguous()
    num_seqs, num_heads, head_dim = q.shape
    group = num_heads // blocks.num_kv_heads
    max_blocks = block_tables.shape[1]
    out = torch.empty_like(q)
    want_mass = block_mass is not None
    if lse is None and want_mass:
        lse = torch.empty(num_seqs, num_heads, device=q.device, dtype=torch.float32)
    block_lse = (torch.full((num_seqs, num_heads, max_blocks), float("-inf"), device=q.device, dtype=torch.float32)
                 if want_mass else out)
    constants = decode_constants(group, head_dim, blocks.block_size, blocks.k.dtype,
                                 dot_precision(q.dtype, blocks.k.dtype), lse is not None, want_mass,
                                 shared_limit(q.device))  # fmt: skip
    _paged_decode_kernel[(num_seqs, blocks.num_kv_heads)](
        q, raw(blocks.k), raw(blocks.v), scale_arg(blocks.k_scale, blocks.k), scale_arg(blocks.v_scale, blocks.v),
        block_tables, context_lens.to(torch.int32), out, out if lse is None else lse, block_lse,
        sm_scale, q.stride(0), q.stride(1), block_tables.stride(0), out.stride(0), out.stride(1),
        num_heads, blocks.num_kv_heads, head_dim, blocks.block_size, max_blocks, **constants,
    )
    if want_mass:
        per_head = torch.exp(block_lse - lse[:, :, None])
        block_mass += per_head if block_mass.dim() == 3 else per_head.sum(dim=1)
    return out
