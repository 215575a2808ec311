"""GQA self-attention with RoPE whose K/V live in one layer of the unified pool: the block every decoder here uses
(Llama, Qwen2, Qwen3 with its per-head q/k norms, SmolLM3 whose no-RoPE layers get ``rope=None``, the Gemma
backbone and the action expert).  Projection names follow Hugging Face so weights load by name."""

import torch
from torch import nn

from oxygen_ros.kernels.cpu_row_ops import rotate_heads_
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.layers.attention import paged_attention
from oxygen_ros.layers.rms_norm import RMSNorm
from oxygen_ros.layers.rotary import RopeAngles


class PagedSelfAttention(nn.Module):
    """Q from the layer's own tokens; K/V written to (or, with slot -1, only read from) pool layer ``layer_idx``."""

    def __init__(
        self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int, layer_idx: int,
        qkv_bias: bool = False, qk_norm_eps: float | None = None,
    ) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)
        self.scale = head_dim**-0.5
        self.qkv_proj: nn.Linear | None = None  # set by fuse_projections
        if qk_norm_eps is not None:  # Qwen3
            self.q_norm, self.k_norm = RMSNorm(head_dim, qk_norm_eps), RMSNorm(head_dim, qk_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def fuse_projections(self) -> None:
        """One [q | k | v] projection instead of three: one weight read per step instead of three calls (weights load
        under Hugging Face's names first, then fuse; once)."""
        if self.qkv_proj is not None:
            return
        parts = (self.q_proj, self.k_proj, self.v_proj)
        fused = nn.Linear(parts[0].in_features, sum(p.out_features for p in parts), bias=parts[0].bias is not None)
        fused.to(device=parts[0].weight.device, dtype=parts[0].weight.dtype)
        with torch.no_grad():
            fused.weight.copy_(torch.cat([p.weight for p in parts]))
            if fused.bias is not None:
                fused.bias.copy_(torch.cat([p.bias for p in parts]))
        self.qkv_proj = fused
        del self.q_proj, self.k_proj, self.v_proj

    def forward(self, x: torch.Tensor, rope: RopeAngles | None, ctx: StepContext, kv: KVCache) -> torch.Tensor:
        """``rope`` None: a layer without positions (SmolLM3's no-RoPE layers)."""
        T = x.shape[0]
        if self.qkv_proj is None:
            q = self.q_proj(x).view(T, self.num_heads, self.head_dim)
            k = self.k_proj(x).view(T, self.num_kv_heads, self.head_dim)
            v = self.v_proj(x).view(T, self.num_kv_heads, self.head_dim)
            if self.q_norm is not None:
                q, k = self.q_norm(q), self.k_norm(k)
            if rope is not None:
                q, k = rope.apply(q, k)
        else:  # q and k are the fused projection's first heads: rotate them together
            qkv = self.qkv_proj(x).view(T, self.num_heads + 2 * self.num_kv_heads, self.head_dim)
            rotated = self.num_heads + self.num_kv_heads
            if self.q_norm is not None:
                qkv[:, : self.num_heads] = self.q_norm(qkv[:, : self.num_heads])
                qkv[:, self.num_heads : rotated] = self.k_norm(qkv[:, self.num_heads : rotated])
            if rope is None:
                qk = qkv
            elif not rotate_heads_(qkv, rotated, rope.cos, rope.sin):
                qk = rope.apply_joined(qkv[:, :rotated])
            else:
                qk = qkv
            q, k = qk[:, : self.num_heads], qk[:, self.num_heads : rotated]
            v = qkv[:, rotated:]
        out = paged_attention(q, k, v, ctx, kv.layers[self.layer_idx], self.scale)
        return self.o_proj(out.reshape(T, -1))
