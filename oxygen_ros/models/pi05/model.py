"""``Pi05Model``: pi0.5 over the shared pool, the PaliGemma prefix and the adaRMS action expert reading it, in its
two attention masks over one implementation.

* pi0.5 as LeRobot and openpi run it (a LeRobot folder, or ``pi05-random-*`` at seeded random weights): the prefix
  [images | prompt with the normalised state as text] is one bidirectional region, so an image's K/V depends on the
  prompt and the state: blocks are shared by requests with the same frame, instruction and state.
* ``causal_prompt`` (``pi05-causal-*``, random weights only): the images are bidirectional, the prompt is causal
  after them and the state is reserved token ids, so the image blocks' K/V depends on the images alone and every
  task asking about a frame shares them; docs/benchmarks.md measures its action error against the faithful mask.

Per observation: ``observation_prefix(tokenizer, task, images, state)`` -> prefill with ``ctx.bidirectional_lens``
= the prefix's ``bidirectional_len`` -> ``sample_actions`` (robot units) and, for language, causal decoding after
the prefix (``compute_logits``, the tied embedding).
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from oxygen_ros.models.common.lerobot_checkpoint import load_weights
from oxygen_ros.models.common.policy import LeRobotPolicy
from oxygen_ros.models.common.prefix import PreparedPrefix, PrefixInputs, bidirectional_prefix
from oxygen_ros.models.common.seeded import seeded_init
from oxygen_ros.models.common.vla_config import VlaConfig
from oxygen_ros.models.pi05.action_expert import ActionExpert
from oxygen_ros.models.pi05.checkpoint import pi05_name
from oxygen_ros.models.pi05.config import RANDOM_CONFIGS, read_pi05_config
from oxygen_ros.models.pi05.prompt import clipped_state_bins, encode_prompt
from oxygen_ros.models.tokenizer import Tokenizer


class Pi05Model(LeRobotPolicy):
    """pi0.5: the shared PaliGemma prefix plus the adaRMS expert (LeRobot's module names under ``expert.``)."""

    def __init__(self, cfg: VlaConfig) -> None:
        super().__init__(cfg, ActionExpert(cfg))

    def state_token_ids(self, state: np.ndarray | Sequence[float]) -> list[int]:
        """The causal variant's state: bin b of each dim as the reserved id ``vocab_size - state_bins + b`` (the last
        256 ids, as pi0-FAST maps its action tokens onto the vocabulary's tail): one token per state dim, the same
        information as pi0.5's text and a cache key that follows the state."""
        cfg = self.config
        return (cfg.vocab_size - cfg.state_bins + clipped_state_bins(state, cfg.state_bins)).tolist()

    def observation_prefix(
        self, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray | None],
        state: np.ndarray | Sequence[float] | None,
    ) -> PreparedPrefix:
        """One observation's prefix. pi0.5: the state normalised (``robot_state``, required) and written into the
        prompt. Causal variant: the bare text, then the state's ids (optional). ValueError as ``prepare_prefix``."""
        if self.config.causal_prompt:
            return self.prepare_prefix(images, tokenizer.encode(text), state)
        return self.prepare_prefix(images, encode_prompt(tokenizer, text, self.robot_state(state)))

    def prepare_prefix(
        self, images: Sequence[np.ndarray | None], prompt_ids: Sequence[int],
        state: np.ndarray | Sequence[float] | None = None,
    ) -> PreparedPrefix:
        """[image tokens | prompt (| state ids)] without running any network, so the engine can check a request and
        key its prefix cache before deciding what to compute; ``images`` has one entry per camera slot (None =
        missing). pi0.5 reads its state from the prompt (``encode_prompt``), so a ``state`` here is refused; the
        causal variant appends its ids and makes only the image tokens bidirectional. No padding: openpi pads the
        prompt and masks the padding out (also from positions), which is what an unpadded ragged prefix computes.
        ValueError on bad images, out-of-vocab ids, a prompt (+ state) over ``max_prompt_tokens`` or an empty prefix."""
        cfg = self.config
        if not cfg.causal_prompt:
            if state is not None:
                raise ValueError("pi0.5 takes the robot state as text in its prompt (encode_prompt), not as a token")
            return bidirectional_prefix(cfg, images, prompt_ids)
        ids = [int(i) for i in prompt_ids] + ([] if state is None else self.state_token_ids(state))
        prefix = bidirectional_prefix(cfg, images, ids)
        return prefix._replace(bidirectional_len=len(prefix.image_hashes) * cfg.tokens_per_image)

    def embed_prefix(
        self, images: Sequence[np.ndarray], prompt_ids: Sequence[int], state: np.ndarray | Sequence[float] | None = None
    ) -> PrefixInputs:
        """The whole prefix at once (``prepare_prefix`` + ``encode_images`` + ``embed_span``) -> PrefixInputs."""
        prepared = self.prepare_prefix(images, prompt_ids, state)
        image_tokens = self.encode_images(prepared.pixels) if images else None
        embeds = self.embed_span(prepared.token_ids, 0, len(prepared.token_ids), image_tokens)
        return PrefixInputs(embeds, prepared.token_ids, prepared.image_hashes)


def load_pi05_folder(folder: Path, config: VlaConfig | None = None) -> tuple[Pi05Model, str]:
    """A LeRobot pi0.5 folder (config.json + model.safetensors, and the processors' normalization stats when
    present) -> (fp32 model on the CPU, model id); ValueError / FileNotFoundError naming the file and the field or
    tensors that do not fit.  ``config``: its config.json as ``read_pi05_config`` read it, if already read."""
    model = Pi05Model(config or read_pi05_config(folder))
    return model, load_weights(folder, model, pi05_name)


def build_random_pi05(name: str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                      seed: int = 0) -> Pi05Model:  # fmt: skip
    """The random-weight pi0.5 ``name`` (a key of ``RANDOM_CONFIGS``), seeded, for tests and benchmarks."""
    if name not in RANDOM_CONFIGS:
        raise ValueError(f"unknown random pi0.5 model {name!r}: use one of {sorted(RANDOM_CONFIGS)}")
    return seeded_init(lambda: Pi05Model(RANDOM_CONFIGS[name]), device, dtype, seed)


def parameter_counts(cfg: VlaConfig) -> dict[str, int]:
    """Parameters per component, counted on the meta device (nothing allocated, so pi05-causal-full is free to count)."""
    with torch.device("meta"):
        model = Pi05Model(cfg)
    counts = {name: sum(p.numel() for p in part.parameters()) for name, part in model.named_children()}
    return counts | {"total": sum(counts.values())}
