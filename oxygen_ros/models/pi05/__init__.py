"""pi0.5-shaped Mixture-of-Transformers VLA (SigLIP + Gemma backbone + action expert) over the paged KV pool."""

from oxygen_ros.models.pi05.config import PI05_CONFIGS, PI05_FULL, PI05_TINY, Pi05Config
from oxygen_ros.models.pi05.model import Pi05Model, PrefixInputs, build_pi05, parameter_counts
from oxygen_ros.models.pi05.preprocess import image_content_hash, preprocess_images

__all__ = [
    "PI05_CONFIGS",
    "PI05_FULL",
    "PI05_TINY",
    "Pi05Config",
    "Pi05Model",
    "PrefixInputs",
    "build_pi05",
    "image_content_hash",
    "parameter_counts",
    "preprocess_images",
]
