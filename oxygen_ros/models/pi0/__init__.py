"""pi0 (Physical Intelligence's flow-matching VLA) from a real checkpoint folder, over the paged KV pool."""

from oxygen_ros.models.pi0.config import is_pi0_config, read_pi0_config
from oxygen_ros.models.pi0.loader import load_pi0_folder
from oxygen_ros.models.pi0.model import Pi0Model
from oxygen_ros.models.pi0.prompt import encode_prompt

__all__ = ["Pi0Model", "encode_prompt", "is_pi0_config", "load_pi0_folder", "read_pi0_config"]
