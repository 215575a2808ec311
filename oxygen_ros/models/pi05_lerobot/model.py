"""``Pi05LeRobotModel``: pi0.5 as LeRobot runs it: the PaliGemma prefix [images | prompt with the state as text],
wholly bidirectional, in the pool, and the adaRMS action expert reading it.

Per observation: ``observation_prefix(tokenizer, task, images, state)`` (the state normalised with the folder's
stats, written into the prompt by ``encode_prompt``) -> prefill with ``ctx.bidirectional_lens`` = the whole prefix
(every prefix token sees every other, so an image's K/V depends on the prompt and the state) ->
``sample_actions`` (robot units).  The language head (``compute_logits``, the tied embedding) decodes text
causally after the same prefix.  No state token: the expert's context is the prefix alone.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from oxygen_ros.models.pi0.config import Pi0Config
from oxygen_ros.models.pi0.loader import load_weights
from oxygen_ros.models.pi0.policy import LeRobotPolicy, bidirectional_prefix
from oxygen_ros.models.pi05.action_expert import ActionExpert
from oxygen_ros.models.pi05.model import PreparedPrefix, seeded_init
from oxygen_ros.models.pi05_lerobot.checkpoint import pi05_name
from oxygen_ros.models.pi05_lerobot.config import RANDOM_CONFIGS, read_pi05_config
from oxygen_ros.models.pi05_lerobot.prompt import encode_prompt
from oxygen_ros.models.tokenizer import Tokenizer


class Pi05LeRobotModel(LeRobotPolicy):
    """pi0.5: the shared PaliGemma prefix plus the adaRMS expert (LeRobot's module names under ``expert.``)."""

    def __init__(self, cfg: Pi0Config) -> None:
        super().__init__(cfg, ActionExpert(cfg))

    def encode_prompt(self, tokenizer: Tokenizer, text: str, state: np.ndarray | Sequence[float]) -> list[int]:
        """The task and the normalised state in pi0.5's prompt (see ``pi05_lerobot/prompt.py``)."""
        return encode_prompt(tokenizer, text, state)

    def observation_prefix(
        self, tokenizer: Tokenizer, text: str, images: Sequence[np.ndarray | None],
        state: np.ndarray | Sequence[float] | None,
    ) -> PreparedPrefix:
        """One observation's prefix: the robot state normalised (``robot_state``) and written into the prompt;
        ValueError as ``robot_state`` and ``prepare_prefix``."""
        return self.prepare_prefix(images, self.encode_prompt(tokenizer, text, self.robot_state(state)))

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


def load_pi05_folder(folder: Path, config: Pi0Config | None = None) -> tuple[Pi05LeRobotModel, str]:
    """A LeRobot pi0.5 folder (config.json + model.safetensors, and the processors' normalization stats when
    present) -> (fp32 model on the CPU, model id); ValueError / FileNotFoundError naming the file and the field or
    tensors that do not fit.  ``config``: its config.json as ``read_pi05_config`` read it, if already read."""
    model = Pi05LeRobotModel(config or read_pi05_config(folder))
    return model, load_weights(folder, model, pi05_name)


def build_random_pi05(name: str, device: torch.device | str, dtype: torch.dtype, seed: int) -> Pi05LeRobotModel:
    """The faithful pi0.5 ``name`` (a key of ``RANDOM_CONFIGS``) at seeded random weights, for tests and benchmarks."""
    if name not in RANDOM_CONFIGS:
        raise ValueError(f"unknown random pi0.5 model {name!r}: use one of {sorted(RANDOM_CONFIGS)}")
    return seeded_init(lambda: Pi05LeRobotModel(RANDOM_CONFIGS[name]), device, dtype, seed)
