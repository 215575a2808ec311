"""A prompt with ``<image>`` placeholders plus camera frames -> token ids, tiles and where each image's tokens lie,
before any network runs, so the engine can validate a request and key its prefix cache first."""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from oxygen_ros.models.idefics3.config import Idefics3Config
from oxygen_ros.models.idefics3.preprocess import preprocess_image
from oxygen_ros.models.idefics3.prompt import expand_images
from oxygen_ros.models.common.images import image_content_hash, validate_image
from oxygen_ros.models.tokenizer import Tokenizer


class VisionPrompt(NamedTuple):
    token_ids: list[int]
    pixels: torch.Tensor | None  # [tiles of every image, 3, S, S]; None without images
    image_spans: list[tuple[int, int]]  # per image: (first <image> position, number of its <image> tokens)
    image_hashes: list[str]  # image_content_hash of each input frame


def max_images(cfg: Idefics3Config) -> int:
    """Most images one prompt may carry: as many as the context holds at their largest tiling (every tile's
    tokens plus its two markers, a newline per grid row and the global image's markers)."""
    side = int(cfg.processing.max_tiles**0.5)
    worst = cfg.processing.max_tiles * (cfg.image_seq_len + 2) + side + 3
    return max(1, cfg.text.max_position_embeddings // worst)


def _frame(image: object, index: int) -> np.ndarray:
    """transformers would rescale float frames twice (once for PIL, once more by rescale_factor): uint8 only."""
    image = validate_image(image, index)
    if image.dtype != np.uint8:
        raise ValueError(f"image {index}: a vision-language model takes uint8 RGB frames, got {image.dtype}")
    return np.ascontiguousarray(image)


def prepare_prompt(cfg: Idefics3Config, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray]) -> VisionPrompt:
    """ValueError for a bad frame or placeholders that do not match the images."""
    frames = [_frame(image, i) for i, image in enumerate(images)]
    tiled = [preprocess_image(frame, cfg.processing) for frame in frames]
    token_ids = tokenizer.encode(expand_images(text, [(t.rows, t.cols) for t in tiled], cfg.image_seq_len))
    positions = [i for i, t in enumerate(token_ids) if t == cfg.image_token_id]
    counts = [t.pixels.shape[0] * cfg.image_seq_len for t in tiled]
    if len(positions) != sum(counts):
        raise ValueError(f"the prompt holds {len(positions)} image tokens where the images need {sum(counts)}")
    spans, first = [], 0
    for count in counts:
        spans.append((positions[first], positions[first + count - 1] + 1 - positions[first]))
        first += count
    pixels = torch.cat([t.pixels for t in tiled]) if tiled else None
    return VisionPrompt(token_ids, pixels, spans, [image_content_hash(f) for f in frames])
