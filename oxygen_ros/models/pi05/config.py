"""pi0.5's configurations: a LeRobot folder's (``read_pi05_config``), and the seeded random-weight ones of the
registry, in one ``VlaConfig``.

``pi05-random-full`` / ``-tiny`` are pi0.5 as it runs (the whole prefix bidirectional, the state as text, LeRobot's
chunk of 50); ``pi05-causal-full`` / ``-tiny`` its causal-prompt approximation (``causal_prompt``: images
bidirectional, the prompt causal after them, the state as reserved ids; openpi's chunk of 10 and 100 prompt tokens).
All use SmolLM2's vocabulary, the tokenizer available offline (PaliGemma's is not).

The tiny shapes are never tuned: every width and MLP dim is the real one / 8, every depth / 3, and head counts, KV
heads, Gemma's head_dim 256, patch size, image size, token counts, action horizon and action dim are kept. So the tiny
model has pi0.5's KV layout per layer (1 KV head x 256) and exactly its 868-token prefix, only fewer, narrower layers.
"""

from dataclasses import replace
from pathlib import Path

from oxygen_ros.models.common.json_config import read_json
from oxygen_ros.models.common.lerobot_config import from_lerobot
from oxygen_ros.models.common.vla_config import (
    DEPTH_DIVISOR, GEMMA_2B, GEMMA_300M, SMOLLM2_VOCAB_SIZE, SO400M, WIDTH_DIVISOR, GemmaConfig, SiglipConfig,
    VlaConfig,
)  # fmt: skip

PROMPT_TOKENS = 200  # LeRobot PI05Config.tokenizer_max_length
_MEMORY_FLAGS = ("use_visual_memory", "use_proprioceptive_memory")  # LeRobot's MEM variants: not pi0.5's prefix

PI05_FULL = VlaConfig(
    vision=SO400M, backbone=GEMMA_2B, expert=GEMMA_300M, vocab_size=SMOLLM2_VOCAB_SIZE, action_horizon=10,
    max_prompt_tokens=100, name="pi05-causal-full", causal_prompt=True,
)  # fmt: skip


def scale_down(cfg: VlaConfig, name: str) -> VlaConfig:
    """Widths and MLP dims / 8, depths / 3; everything else (heads, head_dim, token counts) unchanged."""

    def shrink(part: SiglipConfig | GemmaConfig) -> SiglipConfig | GemmaConfig:
        dims = (part.hidden_size, part.intermediate_size)
        if any(d % WIDTH_DIVISOR for d in dims) or part.num_layers % DEPTH_DIVISOR:
            raise ValueError(f"{part} does not divide by the scaling rule")
        return replace(
            part,
            hidden_size=part.hidden_size // WIDTH_DIVISOR,
            intermediate_size=part.intermediate_size // WIDTH_DIVISOR,
            num_layers=part.num_layers // DEPTH_DIVISOR,
        )

    return replace(cfg, name=name, vision=shrink(cfg.vision), backbone=shrink(cfg.backbone), expert=shrink(cfg.expert))


PI05_TINY = scale_down(PI05_FULL, "pi05-causal-tiny")


def _faithful(shapes: VlaConfig, name: str) -> VlaConfig:
    """pi0.5 (LeRobot's defaults: chunk 50, 32-dim state and action, 10 steps, 3 cameras, 200 prompt tokens) with
    these tower shapes."""
    return VlaConfig(vision=shapes.vision, backbone=shapes.backbone, expert=shapes.expert,
                     vocab_size=SMOLLM2_VOCAB_SIZE, max_prompt_tokens=PROMPT_TOKENS, name=name)  # fmt: skip


RANDOM_CONFIGS = {c.name: c for c in (PI05_TINY, PI05_FULL, _faithful(PI05_TINY, "pi05-random-tiny"),
                                      _faithful(PI05_FULL, "pi05-random-full"))}  # fmt: skip


def is_pi05_config(config: dict) -> bool:
    """True for the config.json of a LeRobot pi0.5 policy."""
    return config.get("type") == "pi05"


def read_pi05_config(folder: Path) -> VlaConfig:
    """config.json of a LeRobot pi0.5 folder -> VlaConfig; ValueError naming the file and the field."""
    source = str(folder / "config.json")
    config = read_json(folder / "config.json")
    if not is_pi05_config(config):
        raise ValueError(f"{source}: field 'type' must be 'pi05'")
    for flag in _MEMORY_FLAGS:
        if config.get(flag):
            raise ValueError(f"{source}: field {flag!r} is true: LeRobot's MEM variant is not implemented")
    return from_lerobot(config, source, PROMPT_TOKENS)
