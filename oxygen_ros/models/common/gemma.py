"""Gemma decoder layers over the paged KV pool: pi0.5's backbone (Gemma 2B shapes) and, with adaptive RMSNorm, the
layers of its action expert (Gemma 300M shapes).

Gemma differs from Llama in ways that all change numerics: RMSNorm scales by ``1 + weight``, the MLP is GeGLU with
tanh-approximated GELU, token embeddings are multiplied by sqrt(width), K/V use a single head (MQA) of head_dim 256
and the LM head is the tied embedding.  Parameter names are Hugging Face's ``GemmaForCausalLM`` names without
``model.``, so an HF Gemma state dict loads into ``GemmaModel`` directly.
"""

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.layers.cpu_decode_row import RowDecoder, RowDecoderCache, RowShape, stack_row_decoder
from oxygen_ros.layers.gated_mlp import GatedMLP
from oxygen_ros.layers.packed_linear import PackedLinear, pack_decoder_layers
from oxygen_ros.layers.rotary import RopeAngles, RotaryEmbedding
from oxygen_ros.layers.self_attention import PagedSelfAttention
from oxygen_ros.models.common.vla_config import GemmaConfig


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm, or pi0.5's adaptive RMSNorm when ``cond_dim`` is given.

    Adaptive mode (openpi's ``RMSNorm(x, cond)``): a linear map of the conditioning vector (the flow-matching time
    embedding) gives per-channel scale, shift and a gate; the gate multiplies the residual branch that follows.  The
    plain mode has no gate.  Both compute in fp32 and cast back, as HF Gemma does.
    """

    def __init__(self, dim: int, eps: float, cond_dim: int | None = None) -> None:
        super().__init__()
        self.eps = eps
        if cond_dim is None:
            self.weight = nn.Parameter(torch.zeros(dim))
        else:
            self.dense = nn.Linear(cond_dim, 3 * dim)

    def forward(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [T, dim], cond [T, cond_dim] (adaptive mode only) -> (normalised x, gate [T, dim] or None)."""
        h = F.rms_norm(x.float(), x.shape[-1:], eps=self.eps)  # one op; bit-equal to h * rsqrt(mean(h^2) + eps)
        if cond is None:
            return (h * (1.0 + self.weight.float())).type_as(x), None
        scale, shift, gate = self.dense(cond).float().chunk(3, dim=-1)
        return (h * (1.0 + scale) + shift).type_as(x), gate.type_as(x)


class GemmaDecoderLayer(nn.Module):
    """Pre-norm block; with ``cond_dim`` its norms are adaptive and their gates scale both residual branches."""

    def __init__(self, cfg: GemmaConfig, layer_idx: int, cond_dim: int | None = None) -> None:
        super().__init__()
        self.input_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cond_dim)
        self.self_attn = PagedSelfAttention(
            cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, layer_idx
        )
        self.post_attention_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cond_dim)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, "gelu_tanh")

    def forward(
        self,
        h: torch.Tensor,
        rope: RopeAngles,
        ctx: StepContext,
        kv: KVCache,
        cond: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x, gate = self.input_layernorm(h, cond)
        h = gated_residual(h, self.self_attn(x, rope, ctx, kv), gate)
        x, gate = self.post_attention_layernorm(h, cond)
        return gated_residual(h, self.mlp(x), gate)


def gated_residual(h: torch.Tensor, branch: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    return h + branch if gate is None else h + branch * gate


class GemmaModel(nn.Module):
    """The VLM backbone: token/prefix embeddings -> final-normed hidden states; tied LM head in ``compute_logits``."""

    def __init__(self, cfg: GemmaConfig, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)
        self.embed_tokens = nn.Embedding(vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(GemmaDecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.packed_head: PackedLinear | None = None
        self._row = RowDecoderCache()  # the one-call decoder of decode steps (packed layers, an fp32 pool), per pool

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings times sqrt(width), the factor rounded to the weight dtype exactly as HF Gemma does."""
        weight = self.embed_tokens.weight
        return self.embed_tokens(input_ids) * torch.tensor(self.cfg.hidden_size**0.5, dtype=weight.dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        ctx: StepContext,
        kv: KVCache,
        input_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[T] ids (or ready [T, width] embeds) at ``positions`` -> [T, width]; K/V land in the pool per ``ctx``."""
        rope = self.rotary.angles(positions)
        h = self.embed(input_ids) if input_embeds is None else input_embeds
        decoded = self._row.decode(h, input_embeds is None, rope, ctx, kv, lambda: self._build_row_decoder(kv))
        if decoded is not None:  # a decode step of language tokens: the stack in one C call
            return self.norm(decoded)[0]
        for layer in self.layers:
            h = layer(h, rope, ctx, kv)
        return self.norm(h)[0]

    def pack_weights(self) -> None:
        """Fuse and prepack the layers for this CPU (``packed_linear``) and read the tied head's table in place with
        the C product (decode steps of up to eight rows: ~5x torch's product over a 49k-token vocabulary, no copy of
        the table); the one-call decoder is looked for again. Call once, after loading."""
        pack_decoder_layers(self.layers)
        self.packed_head = PackedLinear(self.embed_tokens.weight, in_place=True)
        self._row = RowDecoderCache()

    def _build_row_decoder(self, kv: KVCache) -> RowDecoder | None:
        """Llama's one-call decoder with Gemma's GeGLU and its norms' 1 + w (None where the layers are not packed)."""
        attn, cfg = self.layers[0].self_attn, self.cfg
        shape = RowShape(cfg.hidden_size, attn.num_heads, attn.num_kv_heads, attn.head_dim, cfg.intermediate_size,
                         cfg.rms_norm_eps, "gelu_tanh")  # fmt: skip
        return stack_row_decoder(self.layers, shape, kv, norm_offset=1.0)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.packed_head is not None:
            return self.packed_head(hidden)
        return F.linear(hidden, self.embed_tokens.weight)
