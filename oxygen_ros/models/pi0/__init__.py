"""pi0 (Physical Intelligence's flow-matching VLA) from a real checkpoint folder, over the paged KV pool."""

from oxygen_ros.models.pi0.config import Pi0Config, is_pi0_config, read_pi0_config
from oxygen_ros.models.pi0.loader import load_pi0_folder
from oxygen_ros.models.pi0.model import Pi0Model
from oxygen_ros.models.pi0.prompt import encode_prompt, load_pi0_tokenizer

__all__ = [
    "Pi0Config", "Pi0Model", "encode_prompt", "is_pi0_config", "load_pi0_folder", "load_pi0_tokenizer", "read_pi0_config",
]
