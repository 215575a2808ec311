"""Llama / Qwen2 / Qwen3 / SmolLM3-family decoder whose attention runs over the unified paged KV pool (Llama 3.x's
scaled RoPE, Qwen3's q/k norms and SmolLM3's no-RoPE layers are ``LlamaArgs`` fields).

Parameter names are Hugging Face's without the leading ``model.`` so both the GGUF and the safetensors loaders fill
the same ``state_dict``.  The forward pass takes a flattened ragged batch (see ``StepContext``): one call serves
a prefill of several prompts, a batched decode step, or both.
"""

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from oxygen_ros.kernels.cpu_matvec import Q4_1
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.layers.cpu_decode_row import RowDecoder, RowDecoderCache, RowShape, stack_row_decoder
from oxygen_ros.layers.gated_mlp import GatedMLP
from oxygen_ros.layers.packed_linear import PackedLinear, pack_decoder_layers
from oxygen_ros.layers.rms_norm import RMSNorm
from oxygen_ros.layers.rotary import RopeAngles, RotaryEmbedding
from oxygen_ros.layers.self_attention import PagedSelfAttention
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.interface import PreparedInputs, PromptStyle
from oxygen_ros.models.tokenizer import Tokenizer


class LlamaDecoderLayer(nn.Module):
    def __init__(self, args: LlamaArgs, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = PagedSelfAttention(
            args.hidden_size, args.num_heads, args.num_kv_heads, args.head_dim, layer_idx, args.attention_bias,
            args.rms_norm_eps if args.qk_norm else None,
        )
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = GatedMLP(args.hidden_size, args.intermediate_size, "silu")
        self.uses_rope = args.uses_rope(layer_idx)

    def forward(self, h: torch.Tensor, rope: RopeAngles, ctx: StepContext, kv: KVCache) -> torch.Tensor:
        attn = self.self_attn(self.input_layernorm(h), rope if self.uses_rope else None, ctx, kv)
        h, x = self.post_attention_layernorm.add_forward(h, attn)
        return h + self.mlp(x)


class LlamaModel(nn.Module):
    """Decoder stack + LM head; ``forward`` returns hidden states, ``compute_logits`` only for rows that sample.
    A ``ServingModel`` (models/interface.py) of the chat style: text in, text out."""

    prompt_style: PromptStyle = "chat"
    max_images = 0
    camera_keys: tuple[str, ...] = ()
    serves_text = True
    action_shape = None
    default_denoise_steps = 0

    def __init__(self, args: LlamaArgs) -> None:
        super().__init__()
        self.args = args
        self.rotary = RotaryEmbedding(args.head_dim, args.rope_theta, args.rope_scaling)
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        if not args.tie_word_embeddings:
            self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.packed_head: PackedLinear | None = None
        self._row = RowDecoderCache()  # the one-call decoder of decode steps, per pool

    def pack_weights(self, weight_dtype: torch.dtype | None = None) -> None:
        """Fuse q/k/v and gate/up, then prepack every projection and the LM head for this CPU (``packed_linear``);
        the layers' projections stored as ``weight_dtype`` when given (bf16, int8 or Q4_1 under fp32 compute). The head
        stays in the compute dtype under bf16 (a product of several bf16 rows comes back rounded to bf16, and logits
        rounded to bf16 tie often enough to decide greedy answers) and is int8 under int8 and Q4_1 (its products stay
        fp32; at batch 1 the head is a fifth of SmolLM2's fp32 bytes; llama.cpp's Q4_1 files keep it Q8_0, whose
        values int8 groups hold exactly).  Call once, after loading.  A tied head gets its own
        packed copy: the embedding table stays row-major for lookups."""
        head = self.embed_tokens.weight if self.args.tie_word_embeddings else self.lm_head.weight
        pack_decoder_layers(self.layers, weight_dtype)
        self._row = RowDecoderCache()  # a decoder found missing before packing is looked for again
        self.packed_head = PackedLinear(head, weight_dtype=torch.int8 if weight_dtype in (torch.int8, Q4_1) else None)
        if not self.args.tie_word_embeddings:
            del self.lm_head

    def prepare_inputs(self, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray],
                       state: np.ndarray | None) -> PreparedInputs:  # fmt: skip
        """The rendered prompt's ids; a text model reads no images or state (the observation is its text)."""
        if len(images) or state is not None:
            raise ValueError("a text model takes no images or robot state: the observation's text describes them")
        return PreparedInputs(tokenizer.encode(text))

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        ctx: StepContext,
        kv: KVCache,
        input_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        rope = self.rotary.angles(positions)
        h = self.embed_tokens(input_ids) if input_embeds is None else input_embeds
        decoded = self._row.decode(h, input_embeds is None, rope, ctx, kv, lambda: self._build_row_decoder(kv))
        if decoded is not None:
            return self.norm(decoded)
        for layer in self.layers:
            h = layer(h, rope, ctx, kv)
        return self.norm(h)

    def _build_row_decoder(self, kv: KVCache) -> RowDecoder | None:
        """The whole stack in one C call for decode steps over ``kv`` (None: decode layer by layer, as for Qwen3's q/k
        norms and SmolLM3's no-RoPE layers, which the C decoder does not have)."""
        plain = not self.args.qk_norm and not any(not self.args.uses_rope(i) for i in range(self.args.num_layers))
        if not plain or self.packed_head is None:
            return None
        attn = self.layers[0].self_attn
        shape = RowShape(self.args.hidden_size, attn.num_heads, attn.num_kv_heads, attn.head_dim,
                         self.args.intermediate_size, self.args.rms_norm_eps)  # fmt: skip
        return stack_row_decoder(self.layers, shape, kv)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.packed_head is not None:
            return self.packed_head(hidden)
        weight = self.embed_tokens.weight if self.args.tie_word_embeddings else self.lm_head.weight
        return F.linear(hidden, weight)
