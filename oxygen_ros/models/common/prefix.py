"""An observation's VLA prefix before any network runs: validated, laid out as [image tokens | prompt (| state)], and
how much of it is one bidirectional region (pi0 and pi0.5 make the whole prefix one; the causal pi0.5 variant only
its images)."""

import hashlib
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from oxygen_ros.models.common.images import image_content_hash, preprocess_images
from oxygen_ros.models.interface import MultiModalSpan
from oxygen_ros.models.common.vla_config import VlaConfig

class PreparedPrefix(NamedTuple):
    """An observation's prefix, validated and laid out, before any network runs."""

    token_ids: list[int]  # VlaConfig.image_token_id at image positions, then prompt ids, then state ids
    pixels: torch.Tensor  # [N, 3, S, S] preprocessed images (N may be 0)
    image_hashes: list[str]  # image_content_hash of each input image, in order
    bidirectional_len: int  # leading tokens that see each other: pi0.5's image tokens, pi0's images + prompt
    state: np.ndarray | None = None  # pi0: the validated state its last token stands for (the action expert's)


class PrefixInputs(NamedTuple):
    """An observation's prefix, ready to prefill."""

    embeds: torch.Tensor  # [T, backbone width]: image tokens (projected SigLIP) then text tokens (scaled embeddings)
    token_ids: list[int]  # [T]: Pi05Config.image_token_id at image positions, then prompt ids, then state ids
    image_hashes: list[str]  # image_content_hash of each input image, in order


def state_values(state: np.ndarray | Sequence[float], dim: int, index: int = 0) -> np.ndarray:
    """A robot state as fp64 values; ValueError for one that is longer than ``dim``, not 1-D, empty or not finite."""
    values = np.asarray(state, dtype=np.float64)
    if values.ndim != 1 or not 0 < values.size <= dim:
        raise ValueError(f"state {index}: expected a 1-D vector of 1..{dim} values, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"state {index}: contains NaN or infinite values")
    return values


def bidirectional_prefix(
    cfg: VlaConfig, images: Sequence[np.ndarray | None], prompt_ids: Sequence[int]
) -> PreparedPrefix:
    """[image tokens of every present camera | prompt], validated, one bidirectional region (pi0's and pi0.5's
    prefix alike); ValueError on bad images, too many slots, out-of-vocab ids, a prompt over ``max_prompt_tokens``
    or an empty prefix."""
    if len(images) > cfg.max_images:
        raise ValueError(f"{len(images)} camera slots: at most {cfg.max_images} images, the checkpoint's camera slots")
    present = [image for image in images if image is not None]
    ids = [int(i) for i in prompt_ids]
    if not ids and not present:
        raise ValueError("empty prefix: give at least one image or one prompt token")
    if len(ids) > cfg.max_prompt_tokens:
        raise ValueError(f"prompt is {len(ids)} tokens, more than {cfg.max_prompt_tokens}")
    if any(not 0 <= i < cfg.vocab_size for i in ids):
        raise ValueError(f"prompt token ids must lie in [0, {cfg.vocab_size})")
    pixels = preprocess_images(present, cfg.vision.image_size, cfg.max_images)
    token_ids = [cfg.image_token_id] * (len(present) * cfg.tokens_per_image) + ids
    return PreparedPrefix(token_ids, pixels, [image_content_hash(im) for im in present], len(token_ids))


def prefix_spans(prefix: PreparedPrefix, tokens_per_image: int) -> list[MultiModalSpan]:
    """The prefix-cache keys of a VLA prefix: which spans of it depend on content their token ids do not show.

    * Image tokens: keyed by the images' content hashes (one key over all of them: every image token of a VLA sees
      every image), and fed from the vision encoder.
    * A bidirectional region wider than the images (pi0: images + prompt; pi0.5: images + prompt with the state as
      text): every token's K/V depends on the whole region, so each block overlapping it is keyed by the hash of the
      whole region (images and prompt ids).  Two requests share those blocks exactly when frame and instruction
      (and, for pi0.5, the state) are identical, never across prompts.
    * pi0's state token: keyed by the state values, so the block holding it (and every block after) follows the
      state."""
    num_image_tokens = len(prefix.image_hashes) * tokens_per_image
    images_key = hashlib.sha256("|".join(prefix.image_hashes).encode()).digest()
    spans = [MultiModalSpan(0, num_image_tokens, images_key)] if num_image_tokens else []
    region = prefix.bidirectional_len
    if region > num_image_tokens:
        ids = prefix.token_ids[:region]
        key = hashlib.sha256(b"region|" + images_key + struct.pack(f"<{len(ids)}q", *ids)).digest()
        spans.append(MultiModalSpan(0, region, key, image=False))
    if prefix.state is not None:
        spans.append(MultiModalSpan(region, 1, hashlib.sha256(b"state|" + prefix.state.tobytes()).digest(), image=False))
    return spans
