"""Helpers for the pi0.5 tests: placing sequences in a paged pool by hand, and a dense reference without the pool.

The reference recomputes everything from the modules' weights with plain tensor math (its own RMSNorm, RoPE,
attention, time embedding): full attention over [prefix K/V | new K/V] per layer with an explicit mask, no blocks, no
slots.  Agreement with it shows the pool path reads and writes the right K/V; it shares no code with the model's
forward beyond reading the modules' weights.
"""

import math

import torch
import torch.nn.functional as F

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.models.common.gemma import GemmaDecoderLayer, GemmaRMSNorm
from oxygen_ros.models.common.prefix import PrefixInputs
from oxygen_ros.models.pi05 import PI05_TINY, Pi05Model

BLOCK_SIZE = 16


def block_tables(rows: list[list[int]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int64)


def image_len(prefix: PrefixInputs) -> int:
    """Leading image tokens of a prefix: the bidirectional region."""
    return sum(1 for t in prefix.token_ids if t == PI05_TINY.image_token_id)


@torch.no_grad()
def prefill(model: Pi05Model, kv: KVCache, prefix: PrefixInputs, blocks: list[int]) -> None:
    """The prefix in ONE step into ``blocks``: image tokens see each other, prompt tokens are causal."""
    T = len(prefix.token_ids)
    ctx, positions = kv.steps.batch([blocks], [0], [T], [image_len(prefix)])
    model(torch.tensor(prefix.token_ids), positions, ctx, kv, input_embeds=prefix.embeds)


# ---- dense reference ------------------------------------------------------------------------------------------------


def norm(module: GemmaRMSNorm, h: torch.Tensor, cond: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gemma RMSNorm (1 + weight), or adaRMS: scale, shift and gate from ``cond``."""
    x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    if cond is None:
        return x * (1 + module.weight), None
    scale, shift, gate = linear(module.dense, cond).chunk(3, dim=-1)
    return x * (1 + scale) + shift, gate


def linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return x @ module.weight.T + (0 if module.bias is None else module.bias)


def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1]
    angle = pos.double()[:, None] / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = angle.cos().float()[:, None], angle.sin().float()[:, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q [Q, H, D], k/v [K, 1, D] (one KV head), mask [Q, K] -> [Q, H * D]."""
    scores = torch.einsum("qhd,kd->hqk", q, k[:, 0]) / math.sqrt(q.shape[-1])
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return torch.einsum("hqk,kd->qhd", probs, v[:, 0]).flatten(1)


def layer(
    blk: GemmaDecoderLayer,
    h: torch.Tensor,
    pos: torch.Tensor,
    past: tuple[torch.Tensor, torch.Tensor] | None,
    mask: torch.Tensor,
    cond: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Gemma block; returns (h, this block's K, V).  ``past``: K/V prepended (the prefix, for the expert)."""
    a, m = blk.self_attn, blk.mlp
    x, gate = norm(blk.input_layernorm, h, cond)
    T = h.shape[0]
    q = rope(linear(a.q_proj, x).view(T, a.num_heads, a.head_dim), pos)
    k = rope(linear(a.k_proj, x).view(T, 1, a.head_dim), pos)
    v = linear(a.v_proj, x).view(T, 1, a.head_dim)
    keys, values = (k, v) if past is None else (torch.cat([past[0], k]), torch.cat([past[1], v]))
    out = linear(a.o_proj, attention(q, keys, values, mask))
    h = h + (out if gate is None else out * gate)
    x, gate = norm(blk.post_attention_layernorm, h, cond)
    out = linear(m.down_proj, F.gelu(linear(m.gate_proj, x), approximate="tanh") * linear(m.up_proj, x))
    return h + (out if gate is None else out * gate), k, v


@torch.no_grad()
def dense_backbone(
    model: Pi05Model, prefix: PrefixInputs, new_ids: list[int]
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """[prefix | new_ids] from scratch, image tokens bidirectional, everything else causal -> (final-normed hidden
    [T, width], per-layer prefix K/V)."""
    bb = model.backbone
    P, n = prefix.embeds.shape[0], len(new_ids)
    h = torch.cat([prefix.embeds, bb.embed_tokens.weight[new_ids] * math.sqrt(bb.cfg.hidden_size)])
    T = P + n
    L = image_len(prefix)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    mask[:L, :L] = True
    kvs = []
    for blk in bb.layers:
        h, k, v = layer(blk, h, torch.arange(T), None, mask)
        kvs.append((k[:P], v[:P]))
    return norm(bb.norm, h, None)[0], kvs


@torch.no_grad()
def dense_actions(
    model: Pi05Model, prefix_kv: list[tuple[torch.Tensor, torch.Tensor]], noise: torch.Tensor, steps: int
) -> torch.Tensor:
    """Euler flow matching for one sequence: action tokens attend to [prefix K/V | their own K/V], all visible."""
    ex = model.expert
    P, (H, _) = prefix_kv[0][0].shape[0], noise.shape
    pos, mask = torch.arange(P, P + H), torch.ones(H, P + H, dtype=torch.bool)
    width = ex.action_in_proj.weight.shape[0]
    x = noise.clone()
    for i in range(steps):
        t = 1.0 - i / steps
        period = 4e-3 * (4.0 / 4e-3) ** torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64)
        angle = 2 * math.pi / period * t
        temb = torch.cat([angle.sin(), angle.cos()]).float()[None]
        cond = F.silu(linear(ex.time_mlp_out, F.silu(linear(ex.time_mlp_in, temb)))).expand(H, -1)
        h = linear(ex.action_in_proj, x)
        for blk, past in zip(ex.layers, prefix_kv, strict=True):
            h = layer(blk, h, pos, past, mask, cond)[0]
        x = x - linear(ex.action_out_proj, norm(ex.norm, h, cond)[0]) / steps
    return x
