"""pi0.5 as LeRobot and openpi run it (``lerobot/pi05_base``), from LeRobot's checkpoint layout, over the paged pool.

Not ``models/pi05`` (the random-init pi0.5-like VLA of the tests and benchmarks, whose prompt is causal after
bidirectional images): here the whole prefix, images and prompt, is one bidirectional region, and the state is text
in the prompt.  The expert is the same adaRMS expert (``pi05.action_expert.ActionExpert``).
"""

from oxygen_ros.models.pi05_lerobot.config import is_pi05_lerobot_config, read_pi05_config
from oxygen_ros.models.pi05_lerobot.model import Pi05LeRobotModel, load_pi05_folder
from oxygen_ros.models.pi05_lerobot.prompt import discretize_state, encode_prompt, format_prompt

__all__ = [
    "Pi05LeRobotModel", "discretize_state", "encode_prompt", "format_prompt", "is_pi05_lerobot_config",
    "load_pi05_folder", "read_pi05_config",
]
