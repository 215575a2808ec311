"""pi0's shapes and flow-matching settings, read from a folder's config.json in either of the two layouts a pi0
checkpoint comes in, validated field by field (every refusal names the file and the field).

* transformers (``PI0ForConditionalGeneration.save_pretrained``): ``model_type: pi0`` with a PaliGemma
  ``vlm_config`` (Gemma ``text_config`` + SigLIP ``vision_config``) and a Gemma ``dit_config`` (the action expert).
* LeRobot (``lerobot/pi0_base``): ``type: pi0`` with ``paligemma_variant`` / ``action_expert_variant`` names that
  stand for openpi's fixed Gemma 2B / 300M shapes and a So400m/14 tower at ``image_resolution``.

Field names follow pi0.5's config (``action_horizon``, ``action_dim``, ``num_denoise_steps``) so the engine drives
both VLAs alike; the docstring of each says which config.json key it comes from.
"""

from dataclasses import dataclass, replace
from pathlib import Path

from oxygen_ros.models.idefics3.config import config_field, read_json, read_siglip_config
from oxygen_ros.models.pi05.config import (
    PALIGEMMA_VOCAB_SIZE, PI05_FULL, BackbonePoolShape, GemmaConfig, SiglipConfig, check_mixture,
)  # fmt: skip

CAMERA_SLOTS = 3  # openpi's pi0: base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb
PROMPT_TOKENS = 48  # openpi / LeRobot tokenizer_max_length for pi0
GEMMA_VARIANTS = {"gemma_2b": PI05_FULL.backbone, "gemma_300m": PI05_FULL.expert}  # openpi's gemma.get_config
_GEMMA_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
_GELU_TANH = "gelu_pytorch_tanh"


@dataclass(frozen=True)
class Pi0Config(BackbonePoolShape):
    """The whole VLA: PaliGemma (``vision`` + ``backbone``), the action ``expert`` and the flow."""

    vision: SiglipConfig
    backbone: GemmaConfig
    expert: GemmaConfig
    vocab_size: int
    action_horizon: int = 50  # chunk_size
    state_dim: int = 32  # max_state_dim: shorter robot states are zero-padded
    action_dim: int = 32  # max_action_dim: the expert's width of an action, noise drawn at it
    robot_action_dim: int = 0  # LeRobot's output_features.action.shape[0]: the chunk is cut to it; 0 = action_dim
    num_denoise_steps: int = 10  # num_inference_steps
    min_period: float = 4e-3  # of the sine-cosine time embedding
    max_period: float = 4.0
    max_images: int = CAMERA_SLOTS  # camera slots; a missing camera contributes no tokens
    max_prompt_tokens: int = PROMPT_TOKENS  # openpi pads the prompt to this; we never pad, but refuse longer

    def __post_init__(self) -> None:
        check_mixture(self.backbone, self.expert)
        if self.action_horizon < 2:  # paged_attention reads single-token queries as a decode step
            raise ValueError("action_horizon must be >= 2")

    @property
    def output_action_dim(self) -> int:
        """Action dims of a chunk as the robot takes it (LeRobot cuts the padded chunk to these)."""
        return self.robot_action_dim or self.action_dim

    @property
    def tokens_per_image(self) -> int:
        return self.vision.num_patches

    @property
    def image_token_id(self) -> int:
        """Placeholder id at image positions, one past the vocabulary like PaliGemma's ``<image>`` (257152)."""
        return self.vocab_size

    @property
    def state_token_id(self) -> int:
        """Placeholder id of the state token that ends a prefix in the pool (its K/V comes from the action expert)."""
        return self.vocab_size + 1



def is_pi0_config(config: dict) -> bool:
    """True for config.json of a pi0 checkpoint in transformers' or LeRobot's layout."""
    return config.get("model_type") == "pi0" or config.get("type") == "pi0"


def _positive(data: dict, key: str, source: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{source}: field {key!r} must be a positive integer, got {value!r}")
    return value


def _period(data: dict, key: str, source: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{source}: field {key!r} must be a positive number, got {value!r}")
    return float(value)


def _gemma(sub: object, where: str) -> GemmaConfig:
    """A Gemma ``text_config`` / ``dit_config`` -> GemmaConfig; ValueError for what our Gemma does not compute."""
    if not isinstance(sub, dict):
        raise ValueError(f"{where}: missing")  # noqa: TRY004 - one error type for every bad file
    if sub.get("model_type", "gemma") != "gemma":
        raise ValueError(f"{where}: field 'model_type' {sub['model_type']!r} is not gemma")
    sizes = {key: config_field(sub, key, where) for key in _GEMMA_KEYS}
    for key in ("hidden_act", "hidden_activation"):
        if sub.get(key) not in (None, _GELU_TANH):
            raise ValueError(f"{where}: field {key!r} {sub[key]!r} is not implemented ({_GELU_TANH})")
    rope = sub.get("rope_parameters") or sub.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ValueError(f"{where}: field 'rope_parameters' {rope!r}: only unscaled RoPE is implemented")
    heads = sizes["num_attention_heads"]
    return GemmaConfig(
        hidden_size=sizes["hidden_size"],
        intermediate_size=sizes["intermediate_size"],
        num_layers=sizes["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=sub.get("num_key_value_heads") or heads,
        head_dim=sub.get("head_dim") or sizes["hidden_size"] // heads,
        rope_theta=float(rope.get("rope_theta", sub.get("rope_theta", 10000.0))),
        rms_norm_eps=float(sub.get("rms_norm_eps", 1e-6)),
    )


def _flow(config: dict, source: str) -> dict:
    """The chunk and flow settings, under the same config.json keys in both layouts."""
    return {
        "action_horizon": _positive(config, "chunk_size", source, 50),
        "state_dim": _positive(config, "max_state_dim", source, 32),
        "action_dim": _positive(config, "max_action_dim", source, 32),
        "num_denoise_steps": _positive(config, "num_inference_steps", source, 10),
        "min_period": _period(config, "min_period", source, 4e-3),
        "max_period": _period(config, "max_period", source, 4.0),
    }


def _from_transformers(config: dict, source: str) -> Pi0Config:
    vlm = config.get("vlm_config")
    if not isinstance(vlm, dict):
        raise ValueError(f"{source}: field 'vlm_config' is missing")  # noqa: TRY004
    where = f"{source} vlm_config"
    vision = read_siglip_config(vlm, where)
    if vlm["vision_config"].get("vision_use_head", False):
        raise ValueError(f"{where}.vision_config: field 'vision_use_head' must be false (pi0 keeps every patch)")
    backbone = _gemma(vlm.get("text_config"), f"{where}.text_config")
    projection = vlm.get("projection_dim", vlm["vision_config"].get("projection_dim", backbone.hidden_size))
    if projection != backbone.hidden_size:
        raise ValueError(f"{where}: field 'projection_dim' {projection} differs from text_config.hidden_size "
                         f"{backbone.hidden_size}")  # fmt: skip
    vocab = _positive(vlm["text_config"], "vocab_size", f"{where}.text_config", PALIGEMMA_VOCAB_SIZE)
    expert = _gemma(config.get("dit_config"), f"{source} dit_config")
    return Pi0Config(vision, backbone, expert, vocab, **_flow(config, source))


def _variant(config: dict, key: str, source: str) -> GemmaConfig:
    name = config.get(key)
    if name not in GEMMA_VARIANTS:
        raise ValueError(f"{source}: field {key!r} {name!r} is not one of {sorted(GEMMA_VARIANTS)}")
    return GEMMA_VARIANTS[name]


def _camera_slots(config: dict) -> int:
    """Image inputs LeRobot's policy reads: its VISUAL input features plus any empty cameras it pads with."""
    features = config.get("input_features") or {}
    visual = [k for k, f in features.items() if isinstance(f, dict) and f.get("type") == "VISUAL"]
    empty = [f"observation.images.empty_camera_{i}" for i in range(config.get("empty_cameras") or 0)]
    return len(set(visual) | set(empty)) or CAMERA_SLOTS


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


def from_lerobot(config: dict, source: str, prompt_tokens: int = PROMPT_TOKENS) -> Pi0Config:
    """LeRobot's config.json of pi0 or pi0.5 (the two share these fields; ``prompt_tokens`` is the default
    ``tokenizer_max_length``, which differs) -> Pi0Config; ValueError naming the field."""
    resolution = config.get("image_resolution", [224, 224])
    if not (isinstance(resolution, list) and len(resolution) == 2 and resolution[0] == resolution[1]
            and isinstance(resolution[0], int) and resolution[0] % PI05_FULL.vision.patch_size == 0):  # fmt: skip
        raise ValueError(f"{source}: field 'image_resolution' {resolution!r} must be a square multiple of "
                         f"{PI05_FULL.vision.patch_size}")  # fmt: skip
    flow = _flow(config, source)
    return Pi0Config(
        vision=replace(PI05_FULL.vision, image_size=resolution[0]),
        backbone=_variant(config, "paligemma_variant", source),
        expert=_variant(config, "action_expert_variant", source),
        vocab_size=PALIGEMMA_VOCAB_SIZE,
        max_images=_camera_slots(config),
        robot_action_dim=_robot_action_dim(config, source, flow["action_dim"]),
        max_prompt_tokens=_positive(config, "tokenizer_max_length", source, prompt_tokens),
        **flow,
    )


def read_pi0_config(folder: Path) -> Pi0Config:
    """config.json of a pi0 folder -> Pi0Config; ValueError / FileNotFoundError say which file and field."""
    source = str(folder / "config.json")
    config = read_json(folder / "config.json")
    if config.get("model_type") == "pi0":
        return _from_transformers(config, source)
    if config.get("type") == "pi0":
        return from_lerobot(config, source)
    raise ValueError(f"{source}: field 'model_type' (transformers) or 'type' (LeRobot) must be 'pi0'")
