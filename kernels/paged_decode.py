"""``paged_decode_attention``: one new query token per sequence attends to its whole context in the pool."""

import torch
import torch.nn.functional as F

from .blocks import gather_kv_torch
from .dispatch import Backend, use_triton
from .quant_spec import KVBlocks


def paged_decode_attention(
    q: torch.Tensor, blocks: KVBlocks, block_tables: torch.Tensor, context_lens: torch.Tensor, sm_scale: float,
    *, block_mass: torch.Tensor | None = None, lse: torch.Tensor | None = None, backend: Backend | None = None,
) -> torch.Tensor:
    """Attention of ``q`` ``[B, H, d]`` over each sequence's first ``context_lens[b]`` (>= 1) pool tokens; returns
    ``[B, H, d]`` in q's dtype.

    ``block_tables`` ``[B, max_blocks]`` (int32/int64) lists each sequence's blocks in order, in any pool order,
    enough of them to cover its context (not checked: that would sync), padded past it with any valid id.  Query
    head ``h`` reads kv-head ``h // (H // kvh)`` (GQA).  Codes are dequantized inside the kernel; softmax and
    accumulation run in fp32.

    ``block_mass``: optional fp32 ``[B, max_blocks]`` that this call's attention mass per table entry is ADDED to:
    softmax probabilities summed over the block's tokens and over all H query heads (so each row gains H in total).
    Passing one buffer to every layer aggregates a step's mass for attention-aware eviction.  A ``[B, H,
    max_blocks]`` buffer keeps the heads apart (each head's row gains 1), for merging partial attentions.

    ``lse``: optional fp32 ``[B, H]`` that receives each head's log-sum-exp of its scaled scores, so the outputs of
    several calls over disjoint parts of one context (e.g. blocks of two storage formats) can be merged exactly.
    """
    num_seqs, num_heads, head_dim = q.shape
    if head_dim != blocks.head_dim or num_heads % blocks.num_kv_heads:
        raise ValueError(f"paged_decode_attention: q {tuple(q.shape)} does not fit {blocks.num_kv_heads} kv-heads "
                         f"of dim {blocks.head_dim}")
    if block_tables.shape[0] != num_seqs or context_lens.shape != (num_seqs,):
        raise ValueError(f"paged_decode_attention: {num_seqs} queries but block_tables {tuple(block_tables.shape)} "
                         f"and context_lens {tuple(context_lens.shape)}")
    per_head_shape = (num_seqs, num_heads, block_tables.shape[1])
    if block_mass is not None and (block_mass.shape not in (block_tables.shape, per_head_shape)
                                   or block_mass.dtype != torch.float32):  # fmt: skip
        raise ValueError(f"block_mass must be fp32 {tuple(block_tables.shape)} or {per_head_shape}, got "
                         f"{tuple(block_mass.shape)}")
    if lse is not None and (lse.shape != (num_seqs, num_heads) or lse.dtype != torch.float32
                            or not lse.is_contiguous()):  # fmt: skip
        raise ValueError(f"lse must be a contiguous fp32 {(num_seqs, num_heads)}, got {tuple(lse.shape)} {lse.dtype}")
    if use_triton(q.device, backend):
        from .triton_impl import paged_decode as impl

        return impl.paged_decode_attention(q, blocks, block_tables, context_lens, sm_scale, block_mass, lse)
    return paged_decode_attention_torch(q, blocks, block_tables, context_lens, sm_scale, block_mass, lse)


def paged_decode_attention_torch(
    q: torch.Tensor, blocks: KVBlocks, block_tables: torch.Tensor, context_lens: torch.Tensor, sm_scale: float,
    block_mass: torch.Tensor | None = None, lse: torch.Tensor | None = None,
) -> torch.Tensor:
    """Torch reference and CPU runtime path of ``paged_decode_attention``: gather, dequantize, explicit softmax."""
    num_seqs, num_heads, head_dim = q.shape
    kv_heads, block_size = blocks.num_kv_heads, blocks.block_size
    max_context = int(context_lens.max())
    keys, values = gather_kv_torch(blocks, block_tables, max_context)  # [B, L, kvh, d] fp32
    grouped = q.float().view(num_seqs, kv_heads, num_heads // kv_heads, head_dim)
    scores = torch.einsum("bkgd,blkd->bkgl", grouped, keys) * sm_scale
    visible = torch.arange(max_context, device=q.device)[None, :] < context_lens.to(q.device)[:, None]  # [B, L]
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if lse is not None:
        lse.copy_(torch.logsumexp(scores, dim=-1).view(num_seqs, num_heads))
    values = values.masked_fill(~visible[:, :, None, None], 0.0)  # bytes past a context may be another format's
    out = torch.einsum("bkgl,blkd->bkgd", probs, values).reshape(num_seqs, num_heads, head_dim)
    if block_mass is not None:
        num_blocks = -(-max_context // block_size)
        per_head = F.pad(probs.reshape(num_seqs, num_heads, max_context), (0, num_blocks * block_size - max_context))
        per_block = per_head.view(num_seqs, num_heads, num_blocks, block_size).sum(dim=-1)
        block_mass[..., :num_blocks] += per_block if block_mass.dim() == 3 else per_block.sum(dim=1)
    return out.to(q.dtype)
