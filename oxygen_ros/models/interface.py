"""What the engine may ask of a model: the one written interface between ``engine/`` and ``models/``.

The engine imports no model class. It reads a model's capabilities (``prompt_style``, ``max_images``,
``action_shape``, ...) and calls its methods; every model (``LlamaModel``, ``Idefics3Model``, pi0's and pi0.5's
``LeRobotPolicy``) implements ``ServingModel``, image models ``ImageInputs`` too, action models ``ActionHead``.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import torch

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.models.tokenizer import Tokenizer

# How a request's text becomes a prompt: a chat turn (the observation's text in the system turn), a chat turn with
# the frames' image placeholders first, or an observation prefix the model lays out itself (a VLA's).
PromptStyle = Literal["chat", "vision_chat", "observation"]


@dataclass(frozen=True)
class MultiModalSpan:
    """``length`` tokens starting at ``start`` whose K/V depends on content their ids do not show, hashed as
    ``content_hash``: an image's placeholder tokens (``image``: their input rows come from the vision encoder), or a
    key-only span (``image=False``), e.g. pi0's bidirectional prefix, whose every token depends on the whole
    region (images and prompt), or its state token."""

    start: int
    length: int
    content_hash: bytes
    image: bool = True


@dataclass
class PreparedInputs:
    """A request's prompt, validated and laid out, before any network runs (the engine checks and keys it first)."""

    token_ids: list[int]
    mm_spans: list[MultiModalSpan] = field(default_factory=list)
    pixels: torch.Tensor | None = None  # preprocessed images (tiles) for ``encode_images``
    bidirectional_len: int = 0  # leading tokens that see each other, computed in one step
    state: np.ndarray | None = None  # the state the model writes as its prompt's last token (``write_prefix_tail``)
    observation_len: int = 0  # leading tokens only the observation decides (images, a VLA's region)
    action_offset: np.ndarray | None = None  # added to each row of the chunk (actions relative to the state)


class TooManyImages(ValueError):
    """More images than the model can take: OUT_OF_RANGE (a size), where other bad inputs are INVALID_ARGUMENT."""


class ServingModel(Protocol):
    """Every model the engine runs over the pool."""

    prompt_style: PromptStyle
    max_images: int  # images one request may carry (0: a text-only model)
    camera_keys: tuple[str, ...]  # the image keys of its camera slots, in order (a VLA checkpoint's); (): any order
    serves_text: bool  # decodes language after its prompt (pi0 serves action chunks only)
    action_shape: tuple[int, int] | None  # (horizon, action dim) of the noise an action chunk starts from; None: no head
    default_denoise_steps: int  # flow steps of a chunk when the configuration says 0 (the checkpoint's)

    def prepare_inputs(self, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray],
                       state: np.ndarray | None) -> PreparedInputs:  # fmt: skip
        """The prompt of ``text`` (a rendered chat for the chat styles) with these images and state; ValueError
        (``TooManyImages``) naming what is wrong."""

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: StepContext, kv: KVCache,
                input_embeds: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Hidden states [T, width] of a ragged batch; K/V land in the pool per ``ctx``."""

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...


class ImageInputs(Protocol):
    """A model with ``max_images`` > 0: its image tokens' input rows come from its vision encoder."""

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """Preprocessed images -> image-token rows [tokens, width]."""

    def embed_span(self, token_ids: Sequence[int], start: int, n: int,
                   image_tokens: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
        """Input rows of positions ``start .. start + n - 1``: image rows from ``image_tokens``, text embedded."""


class ActionHead(Protocol):
    """A model with ``action_shape``: action chunks from a prefix in the pool."""

    def write_prefix_tail(self, states: Sequence[np.ndarray], block_tables: torch.Tensor, prefix_lens: list[int],
                          kv: KVCache) -> None:  # fmt: skip
        """The K/V of each request's last prompt token, which stands for its ``state`` (pi0's state token)."""

    def sample_actions(self, block_tables: torch.Tensor, prefix_lens: list[int], kv: KVCache,
                       num_steps: int | None = None, generator: torch.Generator | None = None,
                       noise: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Action chunks [B, horizon, robot dims] in robot units for B prefixes in the pool."""
