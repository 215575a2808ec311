"""``Idefics3Model``: SigLIP tiles -> connector -> image-token rows of a Llama decoder running over the paged pool.

The engine drives it like ``LlamaModel`` (``forward`` / ``compute_logits``), plus ``encode_images`` (the vision
encoder and connector, once per request prefix that is not cached) and ``embed_span`` (the input rows of a chunk:
image features where the prompt has ``<image>``, token embeddings elsewhere).  Attention is plain causal, as in
transformers: image tokens need no bidirectional region, so a prompt may be chunked anywhere.
"""

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.idefics3.config import Idefics3Config
from oxygen_ros.models.idefics3.connector import Idefics3Connector
from oxygen_ros.models.idefics3.inputs import max_images, prepare_prompt
from oxygen_ros.models.interface import MultiModalSpan, PreparedInputs, PromptStyle, TooManyImages
from oxygen_ros.models.tokenizer import Tokenizer
from oxygen_ros.models.llama import LlamaModel
from oxygen_ros.models.common.siglip import SiglipVisionTransformer


class Idefics3Model(nn.Module):
    """A ``ServingModel`` (models/interface.py) of the vision-chat style, with ``ImageInputs``."""

    prompt_style: PromptStyle = "vision_chat"
    camera_keys: tuple[str, ...] = ()
    serves_text = True
    action_shape = None
    default_denoise_steps = 0

    def __init__(self, cfg: Idefics3Config) -> None:
        super().__init__()
        self.config = cfg
        self.vision_model = SiglipVisionTransformer(cfg.vision)
        self.connector = Idefics3Connector(cfg.vision.hidden_size, cfg.scale_factor, cfg.text.hidden_size)
        self.text_model = LlamaModel(cfg.text)

    @property
    def args(self) -> LlamaArgs:
        return self.config.text

    @property
    def max_images(self) -> int:
        return max_images(self.config)

    def prepare_inputs(self, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray],
                       state: np.ndarray | None) -> PreparedInputs:  # fmt: skip
        """``text`` holds one ``<image>`` per frame; each image's tokens are keyed by that image alone (attention is
        causal), so frames shared by prompts share their blocks. TooManyImages past what the context holds at the
        frames' largest tiling; ValueError for a bad frame, placeholders that do not match, or a robot state."""
        cfg = self.config
        if len(images) > self.max_images:
            raise TooManyImages(f"{len(images)} images, more than the {self.max_images} this model's context of "
                                f"{cfg.text.max_position_embeddings} tokens holds at their largest tiling")  # fmt: skip
        if state is not None:
            raise ValueError("a vision-language model takes no robot state")
        prompt = prepare_prompt(cfg, tokenizer, text, images)
        spans = [MultiModalSpan(start, length, bytes.fromhex(image_hash))
                 for (start, length), image_hash in zip(prompt.image_spans, prompt.image_hashes)]  # fmt: skip
        end = sum(prompt.image_spans[-1]) if prompt.image_spans else 0
        return PreparedInputs(prompt.token_ids, spans, prompt.pixels if spans else None, observation_len=end)

    def pack_weights(self, weight_dtype: torch.dtype | None = None) -> None:
        """The decoder's CPU prepacking (see ``LlamaModel.pack_weights``); the vision side runs as loaded."""
        self.text_model.pack_weights(weight_dtype)

    @torch.no_grad()
    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """Tiles [N, 3, S, S] -> image-token rows [N * image_seq_len, text width], tiles one after another."""
        weight = self.text_model.embed_tokens.weight
        patches = self.vision_model(pixels.to(device=weight.device, dtype=weight.dtype))
        return self.connector(patches).flatten(0, 1)

    @torch.no_grad()
    def embed_span(
        self, token_ids: Sequence[int], start: int, n: int, image_tokens: torch.Tensor | None
    ) -> torch.Tensor:
        """Input rows of positions ``start .. start+n-1`` of ``token_ids``: the k-th ``<image>`` of the sequence
        takes row k of ``image_tokens`` (as transformers' masked_scatter does), other tokens their embedding."""
        ids = torch.tensor(token_ids[start : start + n], device=self.text_model.embed_tokens.weight.device)
        rows = self.text_model.embed_tokens(ids)
        is_image = ids == self.config.image_token_id
        if image_tokens is not None and bool(is_image.any()):
            first = sum(1 for t in token_ids[:start] if t == self.config.image_token_id)
            rows[is_image] = image_tokens[first : first + int(is_image.sum())].to(rows.dtype)
        return rows

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        ctx: StepContext,
        kv: KVCache,
        input_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.text_model(input_ids, positions, ctx, kv, input_embeds=input_embeds)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.text_model.compute_logits(hidden)
