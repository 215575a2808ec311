"""pi0.5 as LeRobot and openpi run it (``lerobot/pi05_base``), from LeRobot's checkpoint layout, over the paged pool.

Not ``models/pi05`` (the causal-prompt approximation at random weights, ``pi05-causal-*``, whose prompt is causal
after bidirectional images): here the whole prefix, images and prompt, is one bidirectional region, and the state is text
in the prompt.  The expert is the same adaRMS expert (``pi05.action_expert.ActionExpert``).
"""

from oxygen_ros.models.pi05_lerobot.config import RANDOM_CONFIGS, is_pi05_lerobot_config, read_pi05_config
from oxygen_ros.models.pi05_lerobot.model import Pi05LeRobotModel, build_random_pi05, load_pi05_folder
from oxygen_ros.models.pi05_lerobot.prompt import discretize_state, encode_prompt, format_prompt

__all__ = [
    "RANDOM_CONFIGS", "Pi05LeRobotModel", "build_random_pi05", "discretize_state", "encode_prompt", "format_prompt",
    "is_pi05_lerobot_config", "load_pi05_folder", "read_pi05_config",
]
