"""LeRobot's state / action normalization, read from a policy folder's processor files, so the model sees the
normalised state it was trained on and the robot gets its chunks in its own units.

Files (what LeRobot's ``PolicyProcessorPipeline.save_pretrained`` writes beside ``model.safetensors``):

* ``policy_preprocessor.json``: ``{"name", "steps": [...]}``; the step with ``registry_name`` ``normalizer_processor``
  has ``config`` = ``{"eps", "features": {key: {"type", "shape"}}, "norm_map": {feature type: mode}}`` and
  ``state_file``, a safetensors file of flat ``"<feature key>.<stat>"`` tensors (``observation.state.q01``, ...).
* ``policy_postprocessor.json``: the same for the ``unnormalizer_processor`` step, whose stats hold ``action.*``.

Formulas (``lerobot/processor/normalize_processor.py``, ``_NormalizationMixin._apply_transform``), in fp32 torch as
LeRobot computes them: MEAN_STD ``(x - mean) / (std + eps)``, inverse ``x * std + mean``; MIN_MAX / QUANTILES /
QUANTILE10 ``2 * (x - lo) / d - 1``, inverse ``(x + 1) * d / 2 + lo`` with ``d = hi - lo`` (``eps`` where 0; MIN_MAX
writes its inverse ``(x + 1) / 2 * d + lo``); IDENTITY, or a key without stats: unchanged.  A missing file means
identity for its side, with a logged note: the chunks are then in the model's normalised units.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from oxygen_ros.models.common.json_config import read_json
from oxygen_ros.models.common.relative_actions import POSTPROCESSOR, PREPROCESSOR, RelativeActions, read_relative_actions

log = logging.getLogger(__name__)

STATE_KEY, ACTION_KEY = "observation.state", "action"  # LeRobot's OBS_STATE and ACTION
_STEPS = {PREPROCESSOR: "normalizer_processor", POSTPROCESSOR: "unnormalizer_processor"}
_BOUNDS = {"MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}
MODES = ("IDENTITY", "MEAN_STD", *_BOUNDS)


@dataclass(frozen=True)
class FeatureNorm:
    """One feature's mode and stats (fp32 tensors of its width)."""

    mode: str
    stats: dict[str, torch.Tensor]
    eps: float = 1e-8

    @property
    def width(self) -> int | None:
        """Values per sample the stats cover (None for IDENTITY)."""
        return None if self.mode == "IDENTITY" else next(iter(self.stats.values())).numel()

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "IDENTITY":
            return x
        if self.mode == "MEAN_STD":
            return (x - self._stat("mean", x)) / (self._stat("std", x) + self.eps)
        lo, d = self._bounds(x)
        return 2.0 * (x - lo) / d - 1.0

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "IDENTITY":
            return x
        if self.mode == "MEAN_STD":
            return x * self._stat("std", x) + self._stat("mean", x)
        lo, d = self._bounds(x)
        return (x + 1) / 2 * d + lo if self.mode == "MIN_MAX" else (x + 1.0) * d / 2.0 + lo

    def _stat(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return self.stats[name].to(device=x.device, dtype=x.dtype)

    def _bounds(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        low, high = _BOUNDS[self.mode]
        d = self._stat(high, x) - self._stat(low, x)
        return self._stat(low, x), torch.where(d == 0, torch.tensor(self.eps, dtype=x.dtype, device=x.device), d)


IDENTITY = FeatureNorm("IDENTITY", {})


@dataclass(frozen=True)
class Normalizer:
    """State in (normalize) and actions out (unnormalize, then the state added back where the checkpoint's actions
    are relative to it) of one policy."""

    state: FeatureNorm = IDENTITY
    action: FeatureNorm = IDENTITY
    relative: RelativeActions | None = None

    def normalize_state(self, state: np.ndarray) -> np.ndarray:
        """A validated robot state -> the model's units (fp32, as LeRobot holds it); ValueError when its length is
        not the stats'."""
        width = self.state.width
        if width is not None and state.size != width:
            raise ValueError(f"state has {state.size} values, the checkpoint's normalization stats have {width}")
        return self.state.normalize(torch.from_numpy(np.asarray(state, dtype=np.float32))).numpy()

    def unnormalize_actions(self, chunk: torch.Tensor) -> torch.Tensor:
        """Chunks [..., robot action dims] (fp32) -> robot units (before any ``action_offset``)."""
        return self.action.unnormalize(chunk)

    def action_offset(self, state: np.ndarray, width: int) -> np.ndarray | None:
        """What the unnormalized rows of a request's chunk get added: None for absolute actions, else the state
        (validated robot units; normalized first when the checkpoint's pipeline does) on the relative dims."""
        if self.relative is None:
            return None
        seen = self.normalize_state(state) if self.relative.normalized_state else state
        return self.relative.offset(np.asarray(seen), width)


def read_normalizer(folder: Path) -> Normalizer:
    """The folder's processor files -> Normalizer (identity for a side whose file is missing, noted in the log; the
    relative-action steps read by ``read_relative_actions``); ValueError naming the file and the field that does not
    fit."""
    return Normalizer(_feature(folder, PREPROCESSOR, STATE_KEY), _feature(folder, POSTPROCESSOR, ACTION_KEY),
                      read_relative_actions(folder))  # fmt: skip


def _feature(folder: Path, file: str, key: str) -> FeatureNorm:
    path = folder / file
    if not path.is_file():
        log.info("%s is missing: %s passes through unnormalised (the model's units)", path, key)
        return IDENTITY
    steps = read_json(path).get("steps")
    step = next((s for s in steps or [] if isinstance(s, dict) and s.get("registry_name") == _STEPS[file]), None)
    if step is None:
        log.info("%s has no %s step: %s passes through unnormalised", path, _STEPS[file], key)
        return IDENTITY
    config = step.get("config") or {}
    feature = (config.get("features") or {}).get(key)
    mode = (config.get("norm_map") or {}).get(feature.get("type")) if isinstance(feature, dict) else None
    if mode in (None, "IDENTITY"):
        log.info("%s: %s is not normalised (mode %s)", path, key, mode or "none")
        return IDENTITY
    if mode not in MODES:
        raise ValueError(f"{path}: norm_map mode {mode!r} of {key} is not one of {list(MODES)}")
    stats = _stats(folder, path, step, key)
    if not stats:
        log.info("%s: no stats for %s: it passes through unnormalised, as LeRobot passes it", path, key)
        return IDENTITY
    needed = ("mean", "std") if mode == "MEAN_STD" else _BOUNDS[mode]
    missing = [n for n in needed if n not in stats]
    widths = {n: stats[n].shape for n in needed if n in stats}
    if missing or len(set(widths.values())) != 1 or len(next(iter(widths.values()))) != 1:
        raise ValueError(f"{path}: {mode} of {key} needs 1-D stats {list(needed)} of one width, got {widths}")
    return FeatureNorm(mode, {n: stats[n] for n in needed}, float(config.get("eps", 1e-8)))


def _stats(folder: Path, path: Path, step: dict, key: str) -> dict[str, torch.Tensor]:
    """``key``'s stats from the step's state file, fp32 (as LeRobot loads them)."""
    name = step.get("state_file")
    if not name:
        return {}
    if not (folder / name).is_file():
        raise ValueError(f"{path}: state_file {name!r} is missing from {folder}")
    prefix = key + "."
    return {n[len(prefix) :]: t.float() for n, t in load_file(folder / name).items() if n.startswith(prefix)}
