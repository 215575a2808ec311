"""LeRobot's relative actions: a checkpoint trained on ``action - state`` (``use_relative_actions``) emits offsets
from the state it was asked with, and its postprocessor adds that state back after unnormalizing
(``absolute_actions_processor``), except on the joints ``relative_exclude_joints`` names (a gripper stays absolute).

Read from the processor files as LeRobot loads them at inference (``lerobot/processor/relative_action_processor.py``):
the postprocessor's ``absolute_actions_processor`` step, when enabled, adds the state its paired preprocessor step
``relative_actions_processor`` cached: the raw state when that step runs before the ``normalizer_processor`` (as
LeRobot's pi0 / pi0.5 pipelines place it), the normalized one otherwise. A dimension is excluded when an
``exclude_joints`` token equals or occurs in its ``action_names`` entry (lower case); without names every
dimension is relative. A checkpoint whose config.json says ``use_relative_actions`` without that postprocessor step
is refused: its chunks would reach the arm as offsets taken for positions.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oxygen_ros.models.common.json_config import read_json

PREPROCESSOR, POSTPROCESSOR = "policy_preprocessor.json", "policy_postprocessor.json"
RELATIVE_STEP, ABSOLUTE_STEP, NORMALIZER_STEP = "relative_actions_processor", "absolute_actions_processor", \
    "normalizer_processor"  # fmt: skip


@dataclass(frozen=True)
class RelativeActions:
    """Which action dimensions are offsets from the state, and which state they are offsets from."""

    exclude_joints: tuple[str, ...] = ()
    action_names: tuple[str, ...] | None = None
    normalized_state: bool = False  # the state as the model saw it (the relative step after the normalizer)

    def mask(self, width: int) -> np.ndarray:
        """True for each of ``width`` action dimensions the state is added to (LeRobot's ``_build_mask``)."""
        tokens = [name.lower() for name in self.exclude_joints if name]
        if not tokens or self.action_names is None:
            return np.ones(width, dtype=bool)
        names = [name.lower() for name in self.action_names[:width]]
        mask = [not any(token == name or token in name for token in tokens) for name in names]
        return np.array(mask + [True] * (width - len(mask)), dtype=bool)

    def offset(self, state: np.ndarray, width: int) -> np.ndarray:
        """What each row of a ``width``-wide chunk gets added: the state on the relative dimensions (fp32, as
        LeRobot adds it); ValueError when the state has fewer values than the chunk has relative dimensions."""
        mask = self.mask(width)
        needed = int(np.flatnonzero(mask).max()) + 1 if mask.any() else 0
        if state.size < needed:
            raise ValueError(f"this checkpoint's actions are offsets from the state (use_relative_actions), and its "
                             f"{needed} relative action dims need as many state values, got {state.size}")  # fmt: skip
        out = np.zeros(width, dtype=np.float32)
        out[:needed] = state[:needed].astype(np.float32) * mask[:needed]
        return out


def _steps(folder: Path, file: str) -> list[dict]:
    path = folder / file
    if not path.is_file():
        return []
    steps = read_json(path).get("steps")
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _index(steps: list[dict], name: str) -> int | None:
    return next((i for i, s in enumerate(steps) if s.get("registry_name") == name), None)


def _names(value: object, field: str, source: Path) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{source}: {RELATIVE_STEP} field {field!r} must be a list of names, got {value!r}")
    return tuple(value)


def read_relative_actions(folder: Path) -> RelativeActions | None:
    """The folder's relative-action setting (None: its chunks are absolute); ValueError naming the file and field
    when it cannot be honoured."""
    post = _steps(folder, POSTPROCESSOR)
    absolute = _index(post, ABSOLUTE_STEP)
    enabled = absolute is not None and (post[absolute].get("config") or {}).get("enabled") is True
    if not enabled:
        config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
        if config.get("use_relative_actions") is True:
            raise ValueError(f"{folder / 'config.json'}: use_relative_actions is true but {POSTPROCESSOR} has no "
                             f"enabled {ABSOLUTE_STEP}: its chunks would be offsets taken for positions")  # fmt: skip
        return None
    pre = _steps(folder, PREPROCESSOR)
    relative = _index(pre, RELATIVE_STEP)
    if relative is None:
        raise ValueError(f"{folder / POSTPROCESSOR}: {ABSOLUTE_STEP} is enabled but {PREPROCESSOR} has no "
                         f"{RELATIVE_STEP} to say which state and joints")  # fmt: skip
    config, source = pre[relative].get("config") or {}, folder / PREPROCESSOR
    normalizer = _index(pre, NORMALIZER_STEP)
    return RelativeActions(exclude_joints=_names(config.get("exclude_joints") or [], "exclude_joints", source),
                           action_names=_names(config.get("action_names"), "action_names", source),
                           normalized_state=normalizer is not None and normalizer < relative)  # fmt: skip
