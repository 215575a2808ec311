"""pi0's shapes and flow-matching settings, read from a folder's config.json in either of the two layouts a pi0
checkpoint comes in, validated field by field (every refusal names the file and the field).

* transformers (``PI0ForConditionalGeneration.save_pretrained``): ``model_type: pi0`` with a PaliGemma
  ``vlm_config`` (Gemma ``text_config`` + SigLIP ``vision_config``) and a Gemma ``dit_config`` (the action expert).
* LeRobot (``lerobot/pi0_base``): ``type: pi0`` with ``paligemma_variant`` / ``action_expert_variant`` names that
  stand for openpi's fixed Gemma 2B / 300M shapes and a So400m/14 tower at ``image_resolution``.

Field names follow pi0.5's config (``action_horizon``, ``action_dim``, ``num_denoise_steps``) so the engine drives
both VLAs alike; the docstring of each says which config.json key it comes from.
"""

from pathlib import Path

from oxygen_ros.models.common.json_config import config_counts, read_json, read_siglip_config
from oxygen_ros.models.common.lerobot_config import flow_settings, from_lerobot, positive_int
from oxygen_ros.models.common.vla_config import PALIGEMMA_VOCAB_SIZE, GemmaConfig, VlaConfig

_GEMMA_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
_GELU_TANH = "gelu_pytorch_tanh"


def is_pi0_config(config: dict) -> bool:
    """True for config.json of a pi0 checkpoint in transformers' or LeRobot's layout."""
    return config.get("model_type") == "pi0" or config.get("type") == "pi0"


def _gemma(sub: object, where: str) -> GemmaConfig:
    """A Gemma ``text_config`` / ``dit_config`` -> GemmaConfig; ValueError for what our Gemma does not compute."""
    if not isinstance(sub, dict):
        raise ValueError(f"{where}: missing")  # noqa: TRY004 - one error type for every bad file
    if sub.get("model_type", "gemma") != "gemma":
        raise ValueError(f"{where}: field 'model_type' {sub['model_type']!r} is not gemma")
    optional = tuple(key for key in ("num_key_value_heads", "head_dim") if sub.get(key) is not None)  # else derived
    sizes = config_counts(sub, _GEMMA_KEYS + optional, where)
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
        num_kv_heads=sizes.get("num_key_value_heads", heads),
        head_dim=sizes.get("head_dim", sizes["hidden_size"] // heads),
        rope_theta=float(rope.get("rope_theta", sub.get("rope_theta", 10000.0))),
        rms_norm_eps=float(sub.get("rms_norm_eps", 1e-6)),
    )


def _from_transformers(config: dict, source: str) -> VlaConfig:
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
    vocab = positive_int(vlm["text_config"], "vocab_size", f"{where}.text_config", PALIGEMMA_VOCAB_SIZE)
    expert = _gemma(config.get("dit_config"), f"{source} dit_config")
    return VlaConfig(vision, backbone, expert, vocab, **flow_settings(config, source))


def read_pi0_config(folder: Path) -> VlaConfig:
    """config.json of a pi0 folder -> VlaConfig; ValueError / FileNotFoundError say which file and field."""
    source = str(folder / "config.json")
    config = read_json(folder / "config.json")
    if config.get("model_type") == "pi0":
        return _from_transformers(config, source)
    if config.get("type") == "pi0":
        return from_lerobot(config, source)
    raise ValueError(f"{source}: field 'model_type' (transformers) or 'type' (LeRobot) must be 'pi0'")
