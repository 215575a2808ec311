"""A pi0 folder (config.json + model.safetensors, transformers' or LeRobot's layout) -> a ``Pi0Model``, or a
ValueError / FileNotFoundError naming the file and the field or tensors that do not fit."""

from pathlib import Path

from oxygen_ros.models.common.lerobot_checkpoint import load_weights
from oxygen_ros.models.common.vla_config import VlaConfig
from oxygen_ros.models.pi0.config import read_pi0_config
from oxygen_ros.models.pi0.model import Pi0Model


def load_pi0_folder(folder: Path, config: VlaConfig | None = None) -> tuple[Pi0Model, str]:
    """(fp32 model on the CPU, model id); see ``load_weights``.  ``config``: the folder's, if already read."""
    model = Pi0Model(config or read_pi0_config(folder))
    return model, load_weights(folder, model)


