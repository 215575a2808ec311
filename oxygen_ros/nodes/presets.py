"""Model presets: ``config/models/<name>.yaml``, one small file per model as llama_ros ships them, holding the
inference node's model, compute dtype, KV block size, budget and formats, context and sampling defaults (temperature,
top_p, top_k, min_p, repetition_penalty and the seed, used where a request leaves its Sampling fields unset).

Why a layer of its own: switching models should be one argument (`model_preset:=pi05-causal-tiny`, `--preset pi05-causal-tiny`),
not an edited copy of config/oxygen.yaml. A preset's values sit between the parameter file and explicit overrides:
config/oxygen.yaml < the preset < `model:=` / `--model` (and the demo's pool size). The launch file, `oxygen-ros up`
and `oxygen-ros demo` all read presets through ``load``, which checks every value by the rules the node applies at
configure time (``params.parse``) before any node starts, with an error naming the preset, its file and the field.
"""

import math
import re
from pathlib import Path
from typing import Any

import yaml

from oxygen_ros import share
from oxygen_ros.errors import EngineError
from oxygen_ros.nodes import params

# What describes a model and its KV; topics, tiers and scheduling stay in the parameter file.
KEYS = (
    "model", "dtype", "weight_dtype", "block_size", "kv_cache_bytes", "kv_cache_memory_fraction", "kv_dtype", "kv_observation_dtype",
    "max_num_seqs", "max_model_len", "max_num_batched_tokens", "num_denoise_steps", "seed",
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
)  # fmt: skip
INT64 = 1 << 63  # ROS integer parameters are 64-bit
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a file name in the folder, never a path out of it


def names(folder: Path | None = None) -> list[str]:
    """The presets in ``folder`` (default: the installed config/models), by name."""
    return sorted(path.stem for path in (folder or share.presets_dir()).glob("*.yaml"))


def load(name: str, folder: Path | None = None) -> dict[str, Any]:
    """Preset ``name``'s inference-node parameters from ``folder`` (default: the installed config/models).
    ValueError when there is no such preset (naming it and the folder) or a value is wrong (naming the field)."""
    folder = folder or share.presets_dir()
    path = folder / f"{name}.yaml"
    if not NAME.fullmatch(name) or not path.is_file():
        known = ", ".join(names(folder)) or "none"
        raise ValueError(f"unknown model preset {name!r}: no {name}.yaml in {folder} (presets there: {known})")
    where = f"model preset {name} ({path})"
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{where} is not valid YAML: {exc}") from exc
    return checked(values, where)


def checked(values: Any, where: str) -> dict[str, Any]:
    """``values`` as typed parameters when they are a valid preset; ValueError starting with ``where`` otherwise."""
    if not isinstance(values, dict) or not all(isinstance(key, str) for key in values):
        raise ValueError(f"{where}: expected a mapping of parameter: value, got {values!r}")
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: {unknown} cannot be set by a preset; it may set {list(KEYS)}")
    if not values.get("model"):
        raise ValueError(f"{where}: model must name a model (a registered name or a folder)")
    hints = params.types()
    try:
        typed = {key: params.coerce(key, value, hints[key]) for key, value in values.items()}
        for key, value in typed.items():
            if isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
                raise ValueError(f"{key} must fit a 64-bit ROS integer parameter, got {value}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{key} must be a finite number, got {value}")
        params.parse(params.defaults() | typed)  # the node's own configure-time checks
    except EngineError as exc:
        raise ValueError(f"{where}: {exc.message}") from exc
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    return typed
