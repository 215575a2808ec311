"""A pi0 folder (config.json + model.safetensors, transformers' or LeRobot's layout) -> a ``Pi0Model``, or a
ValueError / FileNotFoundError naming the file and the field or tensors that do not fit."""

import hashlib
from collections.abc import Callable
from pathlib import Path

from oxygen_ros.models.hf_loader import read_tensors
from oxygen_ros.models.loaded import check_tensors
from oxygen_ros.models.pi0.checkpoint import our_name, rename_tensors, untie
from oxygen_ros.models.pi0.config import Pi0Config, read_pi0_config
from oxygen_ros.models.pi0.model import Pi0Model
from oxygen_ros.models.pi0.normalization import read_normalizer
from oxygen_ros.models.pi0.policy import LeRobotPolicy


def load_pi0_folder(folder: Path, config: Pi0Config | None = None) -> tuple[Pi0Model, str]:
    """(fp32 model on the CPU, model id); see ``load_weights``.  ``config``: the folder's, if already read."""
    model = Pi0Model(config or read_pi0_config(folder))
    return model, load_weights(folder, model)


def load_weights(folder: Path, model: LeRobotPolicy, rename: Callable[[str], str] = our_name) -> str:
    """The folder's model.safetensors into ``model`` (names mapped by ``rename``, the tied head untied), checked
    against the model's shapes first, and LeRobot's normalization stats when the folder has them
    (``pi0/normalization.py``); returns the model id.  The id folds in a digest of config.json, so KV of
    another checkpoint with the same folder name is never reused."""
    cfg = model.config
    model.set_normalizer(read_normalizer(folder))  # before the weights: a bad stats file is refused at once
    source = str(folder / "model.safetensors")
    tensors, origin = rename_tensors(read_tensors(folder), source, rename)
    untie(tensors, origin, (cfg.vocab_size, cfg.expert.hidden_size), source)
    expected = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    check_tensors(tensors, expected, source, "config.json", origin)
    model.load_state_dict(tensors, strict=True)
    model.eval()
    digest = hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()[:12]
    return f"{folder.resolve().name}@{digest}"
