"""Llama / Qwen2-family decoder whose attention runs over the unified paged KV pool.

Parameter names are Hugging Face's without the leading ``model.`` so both the GGUF and the safetensors loaders fill
the same ``state_dict``.  The forward pass takes a flattened ragged batch (see ``AttentionMetadata``): one call serves
a prefill of several prompts, a batched decode step, or both.
"""

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_ros.engine.kv_cache import KVCache
from oxygen_ros.layers.attention import AttentionMetadata, paged_attention
from oxygen_ros.layers.rotary import RotaryEmbedding
from oxygen_ros.models.args import LlamaArgs


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32 then cast back, as HF Llama does (matters for token-exact agreement)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class LlamaAttention(nn.Module):
    def __init__(self, args: LlamaArgs, layer_idx: int, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = args.num_heads, args.num_kv_heads, args.head_dim
        bias = args.attention_bias
        self.q_proj = nn.Linear(args.hidden_size, args.num_heads * args.head_dim, bias=bias)
        self.k_proj = nn.Linear(args.hidden_size, args.num_kv_heads * args.head_dim, bias=bias)
        self.v_proj = nn.Linear(args.hidden_size, args.num_kv_heads * args.head_dim, bias=bias)
        self.o_proj = nn.Linear(args.num_heads * args.head_dim, args.hidden_size, bias=False)
        self.rotary = rotary
        self.scale = args.head_dim**-0.5

    def forward(self, x: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata, kv: KVCache) -> torch.Tensor:
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(T, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(T, self.num_kv_heads, self.head_dim)
        q, k = self.rotary(positions, q, k)
        out = paged_attention(q, k, v, meta, kv.layers[self.layer_idx], self.scale)
        return self.o_proj(out.reshape(T, -1))


class LlamaMLP(nn.Module):
    def __init__(self, args: LlamaArgs) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.up_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, args: LlamaArgs, layer_idx: int, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = LlamaAttention(args, layer_idx, rotary)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = LlamaMLP(args)

    def forward(self, h: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata, kv: KVCache) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), positions, meta, kv)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    """Decoder stack + LM head; ``forward`` returns hidden states, ``compute_logits`` only for rows that sample."""

    def __init__(self, args: LlamaArgs) -> None:
        super().__init__()
        self.args = args
        rotary = RotaryEmbedding(args.head_dim, args.rope_theta)
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(args, i, rotary) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        if not args.tie_word_embeddings:
            self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        kv: KVCache,
        input_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        h = self.embed_tokens(input_ids) if input_embeds is None else input_embeds
        for layer in self.layers:
            h = layer(h, positions, meta, kv)
        return self.norm(h)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.embed_tokens.weight if self.args.tie_word_embeddings else self.lm_head.weight
        return F.linear(hidden, weight)
