"""LeRobot's pi0.5 config.json (``type: pi05``) -> the shapes and flow settings, in pi0's ``Pi0Config``: the two
policies share every field we read (variants, chunk, dims, steps, periods, cameras); pi0.5's prompt budget is 200
tokens (openpi's ``max_token_len`` for pi0.5), since the state is written into it."""

from pathlib import Path

from oxygen_ros.models.idefics3.config import read_json
from oxygen_ros.models.pi0.config import Pi0Config, from_lerobot
from oxygen_ros.models.pi05.config import PI05_FULL, PI05_TINY, SMOLLM2_VOCAB_SIZE, Pi05Config

PROMPT_TOKENS = 200  # LeRobot PI05Config.tokenizer_max_length
_MEMORY_FLAGS = ("use_visual_memory", "use_proprioceptive_memory")  # LeRobot's MEM variants: not pi0.5's prefix


def is_pi05_lerobot_config(config: dict) -> bool:
    """True for the config.json of a LeRobot pi0.5 policy."""
    return config.get("type") == "pi05"


def read_pi05_config(folder: Path) -> Pi0Config:
    """config.json of a LeRobot pi0.5 folder -> Pi0Config; ValueError naming the file and the field."""
    source = str(folder / "config.json")
    config = read_json(folder / "config.json")
    if not is_pi05_lerobot_config(config):
        raise ValueError(f"{source}: field 'type' must be 'pi05'")
    for flag in _MEMORY_FLAGS:
        if config.get(flag):
            raise ValueError(f"{source}: field {flag!r} is true: LeRobot's MEM variant is not implemented")
    return from_lerobot(config, source, PROMPT_TOKENS)


def _random(shapes: Pi05Config) -> Pi0Config:
    """pi0.5 (LeRobot's defaults: chunk 50, 32-dim state and action, 10 steps, 3 cameras, 200 prompt tokens) with
    these tower shapes and SmolLM2's vocabulary: the tokenizer available offline (PaliGemma's is not)."""
    return Pi0Config(vision=shapes.vision, backbone=shapes.backbone, expert=shapes.expert,
                     vocab_size=SMOLLM2_VOCAB_SIZE, max_prompt_tokens=PROMPT_TOKENS)  # fmt: skip


# The faithful pi0.5 at seeded random weights, for tests and benchmarks: pi05_base's shapes, and the tiny ones.
RANDOM_CONFIGS = {"pi05-random-full": _random(PI05_FULL), "pi05-random-tiny": _random(PI05_TINY)}
