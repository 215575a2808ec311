"""``Pi05LeRobotModel``: pi0.5 as LeRobot runs it: the PaliGemma prefix [images | prompt with the state as text],
wholly bidirectional, in the pool, and the adaRMS action expert reading it.

Per observation: ``encode_prompt(tokenizer, task, state)`` -> ``prepare_prefix(images, ids)`` -> prefill with
``ctx.bidirectional_lens`` = the whole prefix (every prefix token sees every other, so an image's K/V depends on
the prompt and the state) -> ``sample_actions``.  The language head (``compute_logits``, the tied embedding) decodes
text causally after the same prefix.  No state token: the expert's context is the prefix alone.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.models.pi0.config import Pi0Config
from oxygen_ros.models.pi0.loader import load_weights
from oxygen_ros.models.pi0.model import bidirectional_prefix
from oxygen_ros.models.pi05.action_expert import ActionExpert, starting_noise
from oxygen_ros.models.pi05.model import PreparedPrefix
from oxygen_ros.models.pi05.paligemma import PaliGemmaPrefix
from oxygen_ros.models.pi05_lerobot.checkpoint import pi05_name
from oxygen_ros.models.pi05_lerobot.config import read_pi05_config
from oxygen_ros.models.pi05_lerobot.prompt import encode_prompt
from oxygen_ros.models.tokenizer import Tokenizer


class Pi05LeRobotModel(PaliGemmaPrefix):
    """pi0.5: the shared PaliGemma prefix plus the adaRMS expert (LeRobot's module names under ``expert.``)."""

    def __init__(self, cfg: Pi0Config) -> None:
        super().__init__(cfg)
        self.expert = ActionExpert(cfg)

    def encode_prompt(self, tokenizer: Tokenizer, text: str, state: np.ndarray | Sequence[float]) -> list[int]:
        """The task and the normalised state in pi0.5's prompt (see ``pi05_lerobot/prompt.py``)."""
        return encode_prompt(tokenizer, text, state)

    def prepare_prefix(
        self, images: Sequence[np.ndarray | None], prompt_ids: Sequence[int],
        state: np.ndarray | Sequence[float] | None = None,
    ) -> PreparedPrefix:
        """[image tokens of every present camera | prompt], one bidirectional region, no network run; ``images``
        has one entry per camera slot (None = missing).  ValueError as ``bidirectional_prefix``, and for a
        ``state`` given here: pi0.5 reads it from the prompt (``encode_prompt``), never as a token of its own."""
        if state is not None:
            raise ValueError("pi0.5 takes the robot state as text in its prompt (encode_prompt), not as a token")
        return bidirectional_prefix(self.config, images, prompt_ids)

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
        """Action chunks [B, action_horizon, output_action_dim] (fp32, normalised units; the flow runs at the padded
        action_dim and the chunk is cut to the robot's dims, as LeRobot cuts it) for B prefixes in the pool.  Noise
        [B, action_horizon, action_dim] and steps as in ``Pi05Model.sample_actions``."""
        cfg = self.config
        device = block_tables.device
        if noise is None:
            noise = starting_noise((len(prefix_lens), cfg.action_horizon, cfg.action_dim), generator, device)
        steps = cfg.num_denoise_steps if num_steps is None else num_steps
        chunk = self.expert.sample_actions(block_tables, prefix_lens, kv, steps, noise.to(device))
        return chunk[..., : cfg.output_action_dim]


def load_pi05_folder(folder: Path) -> tuple[Pi05LeRobotModel, str]:
    """A LeRobot pi0.5 folder (config.json + model.safetensors) -> (fp32 model on the CPU, model id); ValueError /
    FileNotFoundError naming the file and the field or tensors that do not fit."""
    model = Pi05LeRobotModel(read_pi05_config(folder))
    return model, load_weights(folder, model, pi05_name)
