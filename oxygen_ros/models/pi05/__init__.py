"""pi0.5 (SigLIP + Gemma backbone + adaRMS action expert) over the paged KV pool: LeRobot folders and the seeded
random-weight models, faithful or with the causal-prompt mask (``models/pi05/model.py``)."""

from oxygen_ros.models.pi05.config import PI05_FULL, PI05_TINY, RANDOM_CONFIGS, is_pi05_config, read_pi05_config
from oxygen_ros.models.pi05.model import Pi05Model, build_random_pi05, load_pi05_folder, parameter_counts

__all__ = [
    "PI05_FULL", "PI05_TINY", "RANDOM_CONFIGS", "Pi05Model", "build_random_pi05", "is_pi05_config",
    "load_pi05_folder", "parameter_counts", "read_pi05_config",
]
