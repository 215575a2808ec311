"""GQA self-attention with RoPE whose K/V live in one layer of the unified pool: the block every decoder here uses
(Llama, Qwen2, the Gemma backbone and the action expert).  Projection names follow Hugging Face so weights load
by name."""

import torch
from torch import nn

from oxygen_ros.engine.kv_cache import KVCache
from oxygen_ros.layers.attention import AttentionMetadata, paged_attention
from oxygen_ros.layers.rotary import RotaryEmbedding


class PagedSelfAttention(nn.Module):
    """Q from the layer's own tokens; K/V written to (or, with slot -1, only read from) pool layer ``layer_idx``."""

    def __init__(
        self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int, layer_idx: int,
        rotary: RotaryEmbedding, qkv_bias: bool = False,
    ) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)
        self.rotary = rotary
        self.scale = head_dim**-0.5

    def forward(self, x: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata, kv: KVCache) -> torch.Tensor:
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(T, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(T, self.num_kv_heads, self.head_dim)
        q, k = self.rotary(positions, q, k)
        out = paged_attention(q, k, v, meta, kv.layers[self.layer_idx], self.scale)
        return self.o_proj(out.reshape(T, -1))
