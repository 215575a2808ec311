"""``Pi0Model``: PaliGemma (SigLIP + Gemma 2B) prefix in the shared pool, and pi0's action expert reading it.

Per observation:

1. ``prepare_prefix(images, encode_prompt(tokenizer, text), state)`` -> [image tokens of every present camera |
   prompt tokens | state token].  A camera slot given as None (missing camera) contributes no tokens: openpi and
   transformers mask its tokens out of attention and positions, which computes the same thing.
2. Prefill it with ``forward(..., input_embeds=embed_span(...))`` and ``ctx.bidirectional_lens`` = the whole
   prefix: in pi0 every prefix token sees every other one (images and prompt alike), so the prefix is one step and
   an image's K/V depends on the prompt.
3. ``write_state(state, block_tables, prefix_lens, kv)``: the state token's K/V after the prefix (see
   ``Pi0ActionExpert``).
4. ``sample_actions(block_tables, prefix_lens + 1, kv)``: the action chunk, reading [prefix | state] from the pool.
"""

from collections.abc import Sequence

import numpy as np
import torch

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.models.pi0.action_expert import Pi0ActionExpert
from oxygen_ros.models.pi0.config import Pi0Config
from oxygen_ros.models.pi0.prompt import encode_prompt
from oxygen_ros.models.pi05.action_expert import starting_noise
from oxygen_ros.models.pi05.model import PreparedPrefix
from oxygen_ros.models.pi05.paligemma import PaliGemmaPrefix
from oxygen_ros.models.pi05.preprocess import image_content_hash, preprocess_images
from oxygen_ros.models.tokenizer import Tokenizer


def state_values(state: np.ndarray | Sequence[float], dim: int, index: int = 0) -> np.ndarray:
    """A robot state as fp64 values; ValueError for one that is longer than ``dim``, not 1-D, empty or not finite."""
    values = np.asarray(state, dtype=np.float64)
    if values.ndim != 1 or not 0 < values.size <= dim:
        raise ValueError(f"state {index}: expected a 1-D vector of 1..{dim} values, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"state {index}: contains NaN or infinite values")
    return values


def bidirectional_prefix(
    cfg: Pi0Config, images: Sequence[np.ndarray | None], prompt_ids: Sequence[int]
) -> PreparedPrefix:
    """[image tokens of every present camera | prompt], validated, one bidirectional region (pi0's and pi0.5's
    prefix alike); ValueError on bad images, too many slots, out-of-vocab ids, a prompt over ``max_prompt_tokens``
    or an empty prefix."""
    if len(images) > cfg.max_images:
        raise ValueError(f"{len(images)} camera slots, this checkpoint has {cfg.max_images}")
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


class Pi0Model(PaliGemmaPrefix):
    """pi0: the shared PaliGemma prefix plus pi0's state-token action expert."""

    def __init__(self, cfg: Pi0Config) -> None:
        super().__init__(cfg)
        self.expert = Pi0ActionExpert(cfg)

    def encode_prompt(self, tokenizer: Tokenizer, text: str) -> list[int]:
        """``<bos>`` + text + newline, as pi0 was trained (see ``pi0/prompt.py``)."""
        return encode_prompt(tokenizer, text)

    def prepare_prefix(
        self, images: Sequence[np.ndarray | None], prompt_ids: Sequence[int],
        state: np.ndarray | Sequence[float] | None = None,
    ) -> PreparedPrefix:
        """Validate and lay out the prefix without running any network.  ``images`` holds one entry per camera slot
        in the checkpoint's order (None = that camera is missing).  With ``state``, one state token follows the
        bidirectional [images | prompt] region, so the block table holds its slot (``write_state`` fills it).
        ValueError on bad images or state, too many slots, out-of-vocab ids, a prompt over
        ``max_prompt_tokens`` or an empty prefix."""
        cfg = self.config
        values = None if state is None else state_values(state, cfg.state_dim)
        prefix = bidirectional_prefix(cfg, images, prompt_ids)
        if values is None:
            return prefix
        return prefix._replace(token_ids=[*prefix.token_ids, cfg.state_token_id], state=values)

    def state_tensor(self, states: Sequence[np.ndarray | Sequence[float]]) -> torch.Tensor:
        """Robot states -> [B, state_dim] fp32, each zero-padded to ``state_dim`` as openpi pads it; ValueError for a
        state that is longer, not 1-D, empty or not finite."""
        dim = self.config.state_dim
        rows = [np.pad(values, (0, dim - values.size)) for values in (state_values(s, dim, b) for b, s in enumerate(states))]
        return torch.tensor(np.stack(rows), dtype=torch.float32, device=self.backbone.embed_tokens.weight.device)

    @torch.no_grad()
    def write_state(
        self, states: Sequence[np.ndarray | Sequence[float]], block_tables: torch.Tensor, prefix_lens: list[int],
        kv: KVCache,
    ) -> None:
        """Each sequence's state token into the pool at position ``prefix_lens[b]`` (its block table must hold it)."""
        self.expert.write_state(self.state_tensor(states), block_tables, prefix_lens, kv)

    @torch.no_grad()
    def sample_actions(
        self,
        block_tables: torch.Tensor,
        context_lens: list[int],
        kv: KVCache,
        num_steps: int | None = None,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Action chunks [B, action_horizon, output_action_dim] (fp32, normalised units: the flow runs at the padded
        action_dim, then the chunk is cut to the robot's dims as LeRobot cuts it) for B sequences whose first
        ``context_lens[b]`` pool tokens are [prefix | state token].  Noise [B, action_horizon, action_dim] and steps
        as in ``Pi05Model.sample_actions``."""
        cfg = self.config
        device = block_tables.device
        if noise is None:
            noise = starting_noise((len(context_lens), cfg.action_horizon, cfg.action_dim), generator, device)
        steps = cfg.num_denoise_steps if num_steps is None else num_steps
        chunk = self.expert.sample_actions(block_tables, context_lens, kv, steps, noise.to(device))
        return chunk[..., : cfg.output_action_dim]
