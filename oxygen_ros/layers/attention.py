"""Attention over the paged KV pool for one layer of a step (``StepContext`` says where the batch's tokens sit).

Decode steps read each context from the pool (the new token included, just written): in place with the paged Triton
kernel on a GPU, by shared-prefix attention (C or torch) on a CPU (``StepBuilder.plan`` chose).  On a CPU with the C
kernels, prefill chunks that continue a cached prefix or share a step are rows of that kernel too (``kv.token_rows``);
elsewhere they read their cached prefix from the pool and use their own K/V as computed, padded to ``[B, max_query]``
with the mask the step context built once.
"""

import torch
import torch.nn.functional as F

from oxygen_ros.kv.kv_cache import LayerKV
from oxygen_ros.kv.step_context import StepContext

FOLD_MAX_QUERY = 64  # queries per sequence up to which grouped heads fold into rows (``_folded``; its mask repeats)


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: StepContext, cache: LayerKV, scale: float
) -> torch.Tensor:
    """Store new K/V in the pool, then attend: q [T, H, D], k/v [T, KVH, D] -> out [T, H, D]. ``ctx`` comes from the
    step builder (``kv.steps``), which chose the read path; this only reads it."""
    assert ctx.planned, "a step context must come from kv.steps (StepBuilder), which plans its read path"
    cache.write(k, v, ctx.kv_writes)
    if ctx.is_decode:
        return cache.decode_step(q, ctx, scale)
    if ctx.token_rows is not None:
        return cache.prefill_step(q, ctx, scale)
    rows = ctx.decode_rows
    if rows is None:
        return _padded(q, k, v, ctx.block_tables, ctx, cache, scale)
    out = torch.empty_like(q)
    out.index_copy_(0, rows.tokens, cache.decode_step(q.index_select(0, rows.tokens), rows.context, scale))
    prompt = (x.index_select(0, rows.prompt_tokens) for x in (q, k, v))
    return out.index_copy_(0, rows.prompt_tokens, _padded(*prompt, rows.prompt_tables, ctx, cache, scale))


def _padded(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor, ctx: StepContext, cache: LayerKV,
    scale: float,
) -> torch.Tensor:
    """Prompt rows padded to ``[B, max_query]`` over their cached keys and their own, under the step's mask."""
    layout = ctx.prefill
    assert layout is not None
    num_seqs, max_q = len(layout.cached_lens), layout.max_query
    qs, new_k, new_v = (_pad(x, layout.pad_index, num_seqs, max_q) for x in (q, k, v))
    keys, values = new_k, new_v
    if layout.max_cached:
        past_k, past_v = ctx.past_kv[cache.index] if ctx.past_kv is not None else cache.gather(
            tables, layout.max_cached, q.dtype, plan=ctx.format_plan, lens=layout.cached_lens)
        keys, values = torch.cat([past_k, new_k], dim=1), torch.cat([past_v, new_v], dim=1)
    if q.shape[1] != k.shape[1] and layout.mask is not None and max_q <= FOLD_MAX_QUERY:
        out = _folded(qs, keys, values, layout.mask, scale)
    else:
        out = F.scaled_dot_product_attention(
            qs.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), attn_mask=layout.mask,
            is_causal=layout.mask is None, scale=scale, enable_gqa=q.shape[1] != k.shape[1],
        ).transpose(1, 2)  # fmt: skip  [B, max_q, H, D]
    if layout.pad_index is None:
        return out[0]
    return out.reshape(num_seqs * max_q, *out.shape[2:]).index_select(0, layout.pad_index)


def _folded(qs: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
            scale: float) -> torch.Tensor:  # fmt: skip
    """Grouped-query attention of few queries: the query heads that share a kv head stacked as that head's rows, so
    each kv head is one product over ``group * max_q`` rows (the mask repeated per head) instead of ``enable_gqa``'s
    per-head ones: the same products (outputs equal up to rounding), the attention ~1.4x faster on a CPU where it
    matters (pi0.5's action expert, 8 query heads on 1 kv head, ~11 queries over ~900 keys, at every denoising step:
    an action chunk ~1.08x). [B, max_q, H, D] in and out."""
    batch, max_q, heads, dim = qs.shape
    kv_heads = keys.shape[2]
    group = heads // kv_heads
    rows = qs.view(batch, max_q, kv_heads, group, dim).permute(0, 2, 3, 1, 4).reshape(batch, kv_heads, -1, dim)
    out = F.scaled_dot_product_attention(rows, keys.transpose(1, 2), values.transpose(1, 2),
                                         attn_mask=mask.repeat(1, 1, group, 1), scale=scale)  # fmt: skip
    return out.view(batch, kv_heads, group, max_q, dim).permute(0, 3, 1, 2, 4).reshape(batch, max_q, heads, dim)


def _pad(x: torch.Tensor, pad_index: torch.Tensor | None, num_seqs: int, max_q: int) -> torch.Tensor:
    """Ragged rows [T, heads, D] -> [B, max_q, heads, D] (zeros past each row's queries)."""
    if pad_index is None:
        return x[None]
    padded = x.new_zeros(num_seqs * max_q, *x.shape[1:]).index_copy_(0, pad_index, x)  # whole rows, not elements
    return padded.view(num_seqs, max_q, *x.shape[1:])
