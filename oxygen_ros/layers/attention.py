"""Attention over the paged KV pool (the torch path: CPU runtime and reference for the Triton kernels).

One forward pass carries a flattened, ragged batch: sequence ``b`` contributes ``query_lens[b]`` new tokens at the
end of a context of ``context_lens[b]`` tokens.  The first ``context_lens[b] - query_lens[b]`` tokens are already in
the pool (a cached prefix, earlier chunks, earlier decode steps) and are read through the sequence's block table;
the new tokens' K/V are written to ``slot_mapping`` (``-1`` = do not store, used by the action expert whose K/V is
never kept) and attended to directly.

Masks are causal, except that tokens at absolute positions below ``bidirectional_lens[b]`` also see each other
whatever their order (a prefix-LM mask): pi0.5's image tokens attend to all image tokens, and action-expert tokens to
all action tokens.  Such a region must be computed in one step (a later chunk could not be seen by an earlier one).
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from oxygen_ros.engine.kv_cache import LayerKV

if TYPE_CHECKING:
    from oxygen_ros.engine.kv_plan import StepPlan


@dataclass
class AttentionMetadata:
    """Where a ragged batch's tokens sit in the pool; built once per step and shared by every layer."""

    slot_mapping: torch.Tensor  # [T] int64: flat slot (block * block_size + offset) per new token, -1 = not stored
    query_lens: list[int]  # new tokens per sequence
    context_lens: list[int]  # tokens per sequence after this step, including the new ones
    block_tables: torch.Tensor  # [B, max_blocks] int64, padded with 0 (never read past context_lens)
    bidirectional_lens: list[int] | None = None  # per sequence: positions below it see each other; None = causal
    block_mass: torch.Tensor | None = None  # decode only: fp32 [B, max_blocks], every layer adds its attention mass
    kv_plan: "StepPlan | None" = field(default=None, repr=False)  # mixed-format pools: set by the first layer

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def is_decode(self) -> bool:
        return all(n == 1 for n in self.query_lens)


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata, cache: LayerKV, scale: float
) -> torch.Tensor:
    """Store new K/V in the pool, then attend: q [T, H, D], k/v [T, KVH, D] -> out [T, H, D].

    Decode steps read the whole context back from the pool (the new token included), exactly what the paged decode
    kernel does; prefill chunks read the cached prefix from the pool and use their own K/V as computed.
    """
    plan = cache.plan(meta)
    cache.write(meta.slot_mapping, k, v, plan)
    num_heads = q.shape[1]
    B = meta.num_seqs
    if meta.is_decode:
        context_lens = torch.tensor(meta.context_lens, device=q.device)
        return cache.decode(q, meta.block_tables, context_lens, scale, block_mass=meta.block_mass, plan=plan,
                            lens=meta.context_lens)
    # Prefill (possibly mixed with decode rows): pad to [B, max_q] queries over [cached | new] keys.
    max_q = max(meta.query_lens)
    cached_lens = [c - n for c, n in zip(meta.context_lens, meta.query_lens)]
    max_cached = max(cached_lens)
    past_k, past_v = (None, None)
    if max_cached:
        past_k, past_v = cache.gather(meta.block_tables, max_cached, q.dtype, plan=plan, lens=cached_lens)
    kvh, d = k.shape[1], k.shape[2]
    qs = q.new_zeros(B, max_q, num_heads, d)
    new_k = k.new_zeros(B, max_q, kvh, d)
    new_v = v.new_zeros(B, max_q, kvh, d)
    start = 0
    for b, n in enumerate(meta.query_lens):
        qs[b, :n], new_k[b, :n], new_v[b, :n] = q[start : start + n], k[start : start + n], v[start : start + n]
        start += n
    keys = new_k if past_k is None else torch.cat([past_k, new_k], dim=1)
    values = new_v if past_v is None else torch.cat([past_v, new_v], dim=1)
    dev = q.device
    cached = torch.tensor(cached_lens, device=dev)
    qlens = torch.tensor(meta.query_lens, device=dev)
    kpos = torch.arange(max_cached + max_q, device=dev)
    is_past = kpos < max_cached  # [K]
    past_ok = is_past[None, :] & (kpos[None, :] < cached[:, None])  # [B, K]
    new_idx = kpos - max_cached  # index among new tokens for the new part
    new_ok = (~is_past)[None, :] & (new_idx[None, :] < qlens[:, None])
    qi = torch.arange(max_q, device=dev)
    visible = is_past[None, None, :] | (new_idx[None, None, :] <= qi[None, :, None])  # [1, Q, K]
    if meta.bidirectional_lens is not None:
        bidir = torch.tensor(meta.bidirectional_lens, device=dev) - cached  # new tokens inside the region
        both_inside = (new_idx[None, None, :] < bidir[:, None, None]) & (qi[None, :, None] < bidir[:, None, None])
        visible = visible | both_inside
    mask = (past_ok | new_ok)[:, None, :] & visible  # [B, Q, K]
    out = _sdpa(qs, keys, values, mask[:, None], scale, num_heads)  # [B, max_q, H, D]
    return torch.cat([out[b, :n] for b, n in enumerate(meta.query_lens)], dim=0)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, num_heads: int
) -> torch.Tensor:
    """q [B, Q, H, D], k/v [B, K, KVH, D], boolean mask broadcastable to [B, H, Q, K] -> [B, Q, H, D]."""
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=mask,
        scale=scale,
        enable_gqa=num_heads != k.shape[2],
    )
    return out.transpose(1, 2)
