"""``Pi05Model``: the CAUSAL-PROMPT APPROXIMATION of pi0.5 (registry names ``pi05-causal-tiny`` /
``pi05-causal-full``, random weights only): SigLIP + Gemma backbone + adaRMS action expert over the shared pool,
with the prompt causal after bidirectional images and the state as reserved token ids.  Real pi0.5 makes the whole
prefix bidirectional and writes the state as text: that is ``models/pi05_lerobot`` (``pi05-random-*`` at random
weights, or a LeRobot folder); docs/benchmarks.md measures the action error of this approximation against it.

How the engine uses it, per observation (one "frame"):

1. ``embed_prefix(images, prompt_ids, state)`` -> the prefix [image tokens | prompt | state tokens] as embeddings, the
   token ids for the prefix-cache hash chain and the images' content hashes.
2. Prefill it: ``forward(token_ids, arange(T), ctx, kv, input_embeds=embeds)`` with ``ctx.bidirectional_lens`` =
   the number of image tokens: image tokens see each other (so all image tokens go in ONE step), prompt tokens are
   causal.  PaliGemma makes the prompt bidirectional too; we keep it causal so the image blocks' K/V depends on the
   images only and is shared by every task asking about the same frame (the prefix-cache key of those blocks is
   the images' content hashes), which is what OxyGen is for.  The compute per token is the same.
3. Language: ordinary causal decode after the prefix (positions T, T+1, ...) with ``forward`` + ``compute_logits``.
4. Actions: ``sample_actions(block_tables, prefix_lens, kv)`` for any batch of sequences whose prefixes are in the pool;
   it never writes the pool, so it can run before, between or after decode steps on the same blocks.
"""

from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import numpy as np
import torch

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.models.pi05.action_expert import ActionExpert, starting_noise
from oxygen_ros.models.pi05.config import PI05_CONFIGS, Pi05Config
from oxygen_ros.models.pi05.paligemma import PaliGemmaPrefix
from oxygen_ros.models.pi05.preprocess import discretize_state, image_content_hash, preprocess_images
from oxygen_ros.models.tokenizer import Tokenizer

M = TypeVar("M", bound=torch.nn.Module)


class PreparedPrefix(NamedTuple):
    """An observation's prefix, validated and laid out, before any network runs."""

    token_ids: list[int]  # Pi05Config.image_token_id at image positions, then prompt ids, then state ids
    pixels: torch.Tensor  # [N, 3, S, S] preprocessed images (N may be 0)
    image_hashes: list[str]  # image_content_hash of each input image, in order
    bidirectional_len: int  # leading tokens that see each other: pi0.5's image tokens, pi0's images + prompt
    state: np.ndarray | None = None  # pi0: the validated state its last token stands for (the action expert's)


class PrefixInputs(NamedTuple):
    """An observation's prefix, ready to prefill."""

    embeds: torch.Tensor  # [T, backbone width]: image tokens (projected SigLIP) then text tokens (scaled embeddings)
    token_ids: list[int]  # [T]: Pi05Config.image_token_id at image positions, then prompt ids, then state ids
    image_hashes: list[str]  # image_content_hash of each input image, in order


class Pi05Model(PaliGemmaPrefix):
    """pi0.5-shaped VLA, causal prompt: the shared PaliGemma prefix plus state-as-tokens and the adaRMS expert."""

    def __init__(self, cfg: Pi05Config) -> None:
        super().__init__(cfg)
        self.expert = ActionExpert(cfg)

    def state_token_ids(self, state: np.ndarray | Sequence[float]) -> list[int]:
        """pi0.5 writes the discretised state into the prompt as text.  Without PaliGemma's tokenizer we map bin b to
        the reserved id ``vocab_size - state_bins + b`` (the last 256 ids, as pi0-FAST maps its action tokens onto
        the vocabulary's tail): one token per state dim, the same information and a cache key that follows the state."""
        cfg = self.config
        return (cfg.vocab_size - cfg.state_bins + discretize_state(state, cfg.state_bins)).tolist()

    def observation_prefix(
        self, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray], state: np.ndarray | Sequence[float] | None
    ) -> PreparedPrefix:
        """One observation's prefix: the bare text's ids, then ``prepare_prefix`` (state optional here)."""
        return self.prepare_prefix(images, self.encode_prompt(tokenizer, text), state)

    def prepare_prefix(
        self, images: Sequence[np.ndarray], prompt_ids: Sequence[int], state: np.ndarray | Sequence[float] | None = None
    ) -> PreparedPrefix:
        """Validate and lay out [image tokens | prompt tokens | state tokens] without running any network, so the
        engine can check a request and key its prefix cache before deciding what to compute.  No padding: openpi
        pads the prompt to ``max_prompt_tokens`` and masks the padding out (also from positions), which is what an
        unpadded ragged prefix computes.  ValueError on bad images, out-of-vocab ids, a prompt (+ state) over
        ``max_prompt_tokens`` or an empty prefix."""
        cfg = self.config
        text_ids = [int(i) for i in prompt_ids] + ([] if state is None else self.state_token_ids(state))
        if not text_ids and not images:
            raise ValueError("empty prefix: give at least one image or one prompt token")
        if len(text_ids) > cfg.max_prompt_tokens:
            raise ValueError(f"prompt + state is {len(text_ids)} tokens, more than {cfg.max_prompt_tokens}")
        if any(not 0 <= i < cfg.vocab_size for i in text_ids):
            raise ValueError(f"prompt token ids must lie in [0, {cfg.vocab_size})")
        pixels = preprocess_images(images, cfg.vision.image_size, cfg.max_images)
        num_image_tokens = len(images) * cfg.tokens_per_image
        token_ids = [cfg.image_token_id] * num_image_tokens + text_ids
        return PreparedPrefix(token_ids, pixels, [image_content_hash(im) for im in images], num_image_tokens)

    def embed_prefix(
        self, images: Sequence[np.ndarray], prompt_ids: Sequence[int], state: np.ndarray | Sequence[float] | None = None
    ) -> PrefixInputs:
        """The whole prefix at once (``prepare_prefix`` + ``encode_images`` + ``embed_span``) -> PrefixInputs."""
        prepared = self.prepare_prefix(images, prompt_ids, state)
        image_tokens = self.encode_images(prepared.pixels) if images else None
        embeds = self.embed_span(prepared.token_ids, 0, len(prepared.token_ids), image_tokens)
        return PrefixInputs(embeds, prepared.token_ids, prepared.image_hashes)

    @torch.no_grad()
    def sample_actions(
        self,
        block_tables: torch.Tensor,
        prefix_lens: list[int],
        kv: KVCache,
        num_steps: int | None = None,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Action chunks [B, horizon, action_dim] (fp32) for B prefixes in the pool (rows may share blocks).

        The starting noise is ``noise`` if given (e.g. one seeded draw per request, independent of batching), else
        one standard-normal draw of [B, horizon, action_dim] from ``generator``.  ``num_steps`` defaults to the
        config's ``num_denoise_steps``.
        """
        cfg = self.config
        device = block_tables.device
        if noise is None:
            noise = starting_noise((len(prefix_lens), cfg.action_horizon, cfg.action_dim), generator, device)
        steps = cfg.num_denoise_steps if num_steps is None else num_steps
        return self.expert.sample_actions(block_tables, prefix_lens, kv, steps, noise.to(device))


def build_pi05(
    name: str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0
) -> Pi05Model:
    """The causal-prompt approximation ``name`` at seeded random weights (see ``seeded_init``)."""
    if name not in PI05_CONFIGS:
        raise ValueError(f"unknown pi0.5 model {name!r}: use one of {sorted(PI05_CONFIGS)}")
    return seeded_init(lambda: Pi05Model(PI05_CONFIGS[name]), device, dtype, seed)


def seeded_init(make: Callable[[], M], device: torch.device | str, dtype: torch.dtype, seed: int) -> M:
    """``make()`` built on ``device`` with its random init seeded (no pi0.5 weights are available offline), in
    ``dtype``, eval mode; the global RNG is untouched.  The same seed gives the same weights on the same device type."""
    device = torch.device(device)
    cuda_devices = []
    if device.type == "cuda":
        cuda_devices = [torch.cuda.current_device() if device.index is None else device.index]
    with torch.random.fork_rng(devices=cuda_devices), device:
        torch.manual_seed(seed)
        model = make()
    return model.to(dtype=dtype).eval()


def parameter_counts(cfg: Pi05Config) -> dict[str, int]:
    """Parameters per component, counted on the meta device (nothing allocated, so pi05-causal-full is free to count)."""
    with torch.device("meta"):
        model = Pi05Model(cfg)
    counts = {name: sum(p.numel() for p in part.parameters()) for name, part in model.named_children()}
    return counts | {"total": sum(counts.values())}
