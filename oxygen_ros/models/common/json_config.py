"""Reading a checkpoint's JSON config: every refusal names the file and the field (shared by the model packages)."""

import json
from pathlib import Path
from typing import Any

from oxygen_ros.models.args import checked_count, config_count_bound
from oxygen_ros.models.common.vla_config import SiglipConfig

_VISION_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "image_size",
                "patch_size")  # fmt: skip


def read_json(path: Path) -> dict:
    """A JSON object file; FileNotFoundError / ValueError naming the file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")  # noqa: TRY004 - one error type for every bad file
    return data


def config_field(data: dict, key: str, source: str, kind: type | tuple[type, ...] = int) -> Any:
    """``data[key]`` if it has type ``kind`` (bools are no ints), else a ValueError naming ``source`` and the field."""
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ValueError(f"{source}: field {key!r} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def config_counts(data: dict, keys: tuple[str, ...], source: str) -> dict[str, int]:
    """The sizes ``keys`` of ``data`` (layers, heads, widths), each an integer in [1, its bound] (``checked_count``):
    bounded before they size a loop or divide."""
    return {key: checked_count(source, f"field {key!r}", data.get(key), config_count_bound(key)) for key in keys}


def read_siglip_config(config: dict, source: str) -> SiglipConfig:
    """``config['vision_config']`` (a SigLIP tower, as Idefics3 and PaliGemma configs write it) -> SiglipConfig."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        raise ValueError(f"{source}: field 'vision_config' is missing")  # noqa: TRY004
    where = f"{source} vision_config"
    sizes = config_counts(vision, _VISION_KEYS, where)
    if vision.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ValueError(f"{where}: field 'hidden_act' {vision['hidden_act']!r} is not implemented (gelu_pytorch_tanh)")
    if vision.get("num_channels", 3) != 3:
        raise ValueError(f"{where}: field 'num_channels' must be 3 (RGB), got {vision['num_channels']!r}")
    if sizes["image_size"] % sizes["patch_size"] or sizes["hidden_size"] % sizes["num_attention_heads"]:
        raise ValueError(f"{where}: image_size must be a multiple of patch_size and hidden_size of the head count")
    return SiglipConfig(
        hidden_size=sizes["hidden_size"],
        intermediate_size=sizes["intermediate_size"],
        num_layers=sizes["num_hidden_layers"],
        num_heads=sizes["num_attention_heads"],
        patch_size=sizes["patch_size"],
        image_size=sizes["image_size"],
        layer_norm_eps=float(vision.get("layer_norm_eps", 1e-6)),
    )
