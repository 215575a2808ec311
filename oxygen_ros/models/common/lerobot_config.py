"""A LeRobot pi0 / pi0.5 checkpoint's shapes and flow settings (``VlaConfig``), read from
LeRobot's config.json, whose ``paligemma_variant`` / ``action_expert_variant`` names stand for openpi's fixed Gemma
2B / 300M shapes and a So400m/14 tower at ``image_resolution``. Every refusal names the file and the field."""

from dataclasses import replace

from oxygen_ros.models.common.vla_config import (
    GEMMA_2B, GEMMA_300M, PALIGEMMA_VOCAB_SIZE, PROMPT_TOKENS, SO400M, CAMERA_SLOTS, GemmaConfig, VlaConfig,
)  # fmt: skip


GEMMA_VARIANTS = {"gemma_2b": GEMMA_2B, "gemma_300m": GEMMA_300M}  # openpi's gemma.get_config


def positive_int(data: dict, key: str, source: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{source}: field {key!r} must be a positive integer, got {value!r}")
    return value


def _period(data: dict, key: str, source: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{source}: field {key!r} must be a positive number, got {value!r}")
    return float(value)


def flow_settings(config: dict, source: str) -> dict:
    """The chunk and flow settings, under the same config.json keys in both layouts."""
    return {
        "action_horizon": positive_int(config, "chunk_size", source, 50),
        "state_dim": positive_int(config, "max_state_dim", source, 32),
        "action_dim": positive_int(config, "max_action_dim", source, 32),
        "num_denoise_steps": positive_int(config, "num_inference_steps", source, 10),
        "min_period": _period(config, "min_period", source, 4e-3),
        "max_period": _period(config, "max_period", source, 4.0),
    }


def _variant(config: dict, key: str, source: str) -> GemmaConfig:
    name = config.get(key)
    if name not in GEMMA_VARIANTS:
        raise ValueError(f"{source}: field {key!r} {name!r} is not one of {sorted(GEMMA_VARIANTS)}")
    return GEMMA_VARIANTS[name]


def camera_keys(config: dict) -> tuple[str, ...]:
    """The image inputs LeRobot's policy reads, in its order (``config.image_features``: the VISUAL input features
    as config.json lists them, then the empty cameras it pads with; its validate_features appends those)."""
    features = config.get("input_features") or {}
    keys = [k for k, f in features.items() if isinstance(f, dict) and f.get("type") == "VISUAL"]
    empty = [f"observation.images.empty_camera_{i}" for i in range(config.get("empty_cameras") or 0)]
    return tuple(keys + [k for k in empty if k not in keys])


def _robot_action_dim(config: dict, source: str, action_dim: int) -> int:
    """output_features.action.shape[0] of LeRobot's config (at most ``action_dim``), 0 when it names none."""
    action = (config.get("output_features") or {}).get("action")
    if action is None:
        return 0
    shape = action.get("shape") if isinstance(action, dict) else None
    if not (isinstance(shape, list) and len(shape) == 1 and isinstance(shape[0], int) and 0 < shape[0] <= action_dim):
        raise ValueError(f"{source}: field 'output_features.action.shape' {shape!r} must be [1..{action_dim}] "
                         "(at most max_action_dim)")  # fmt: skip
    return shape[0]


def from_lerobot(config: dict, source: str, prompt_tokens: int = PROMPT_TOKENS) -> VlaConfig:
    """LeRobot's config.json of pi0 or pi0.5 (the two share these fields; ``prompt_tokens`` is the default
    ``tokenizer_max_length``, which differs) -> VlaConfig; ValueError naming the field."""
    resolution = config.get("image_resolution", [224, 224])
    if not (isinstance(resolution, list) and len(resolution) == 2 and resolution[0] == resolution[1]
            and isinstance(resolution[0], int) and resolution[0] % SO400M.patch_size == 0):  # fmt: skip
        raise ValueError(f"{source}: field 'image_resolution' {resolution!r} must be a square multiple of "
                         f"{SO400M.patch_size}")  # fmt: skip
    flow = flow_settings(config, source)
    cameras = camera_keys(config)
    return VlaConfig(
        vision=replace(SO400M, image_size=resolution[0]),
        backbone=_variant(config, "paligemma_variant", source),
        expert=_variant(config, "action_expert_variant", source),
        vocab_size=PALIGEMMA_VOCAB_SIZE,
        max_images=len(cameras) or CAMERA_SLOTS,
        camera_keys=cameras,
        robot_action_dim=_robot_action_dim(config, source, flow["action_dim"]),
        max_prompt_tokens=positive_int(config, "tokenizer_max_length", source, prompt_tokens),
        **flow,
    )
