"""The PaliGemma half that pi0 and pi0.5 share: SigLIP + projector -> image tokens, and the Gemma backbone that
computes the observation prefix into the pool.  Both VLAs subclass it and add their own prefix layout and expert."""

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import nn

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.models.common.gemma import GemmaModel
from oxygen_ros.models.common.siglip import ImageEncoder
from oxygen_ros.models.common.vla_config import GemmaConfig, SiglipConfig
from oxygen_ros.models.tokenizer import Tokenizer


class PaliGemmaShapes(Protocol):
    """What a VLA config tells the shared half (``VlaConfig`` has it)."""

    vision: SiglipConfig
    backbone: GemmaConfig
    vocab_size: int
    num_layers: int
    num_kv_heads: int
    head_dim: int


class PaliGemmaPrefix(nn.Module):
    """``forward`` / ``compute_logits`` mirror ``LlamaModel`` so the engine drives every model alike."""

    def __init__(self, cfg: PaliGemmaShapes) -> None:
        super().__init__()
        self.config = cfg
        self.image_encoder = ImageEncoder(cfg.vision, cfg.backbone.hidden_size)
        self.backbone = GemmaModel(cfg.backbone, cfg.vocab_size)

    @property
    def args(self) -> PaliGemmaShapes:
        """Has ``num_layers``, ``num_kv_heads``, ``head_dim`` and ``vocab_size`` like ``LlamaArgs``."""
        return self.config

    def encode_prompt(self, tokenizer: Tokenizer, text: str) -> list[int]:
        """The prompt's token ids as this VLA was trained on them; here the bare text (pi0 overrides it)."""
        return tokenizer.encode(text)

    def kv_layout(self, block_size: int, dtype: torch.dtype) -> KVLayout:
        return KVLayout(self.config.num_layers, self.config.num_kv_heads, self.config.head_dim, block_size, dtype)

    @torch.no_grad()
    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """Preprocessed images [N, 3, S, S] -> image tokens [N * tokens_per_image, width] (the SigLIP pass)."""
        weight = self.backbone.embed_tokens.weight
        return self.image_encoder(pixels.to(device=weight.device, dtype=weight.dtype))

    @torch.no_grad()
    def embed_span(
        self, token_ids: Sequence[int], start: int, n: int, image_tokens: torch.Tensor | None
    ) -> torch.Tensor:
        """Embeddings of positions ``start .. start+n-1`` of ``token_ids``, a prefix whose image tokens (output of
        ``encode_images``) come first: image rows are taken from ``image_tokens``, text rows embedded."""
        token_ids = token_ids[start : start + n]
        num_image = 0 if image_tokens is None else image_tokens.shape[0]
        split = min(max(num_image - start, 0), len(token_ids))
        parts = []
        if split:
            parts.append(image_tokens[start : start + split])
        if split < len(token_ids):
            ids = torch.tensor(token_ids[split:], device=self.backbone.embed_tokens.weight.device)
            parts.append(self.backbone.embed(ids))
        return torch.cat(parts)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        ctx: StepContext,
        kv: KVCache,
        input_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Backbone over a ragged batch (prefix prefill with ``input_embeds``, or language decode) -> [T, width]."""
        return self.backbone(input_ids, positions, ctx, kv, input_embeds)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.backbone.compute_logits(hidden)
