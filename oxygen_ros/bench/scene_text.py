"""A deterministic textual scene of a given token length: the shared observation prefix for engine benchmarks."""

import numpy as np

from oxygen_ros.models.tokenizer import Tokenizer

_COLORS = ["red", "blue", "green", "yellow", "white", "black", "orange", "purple"]
_THINGS = ["cup", "box", "apple", "bottle", "plate", "book", "ball", "phone", "bowl", "can"]


def observation_text(tokenizer: Tokenizer, num_tokens: int, seed: int = 0) -> str:
    """Sentences describing objects on a table, added until the text is ``num_tokens`` tokens long or just over."""
    rng = np.random.default_rng(seed)
    text = "A table seen from the robot's camera."
    i = 0
    while len(tokenizer.encode(text)) < num_tokens:
        color, thing = rng.choice(_COLORS), rng.choice(_THINGS)
        x, y, h = rng.integers(-50, 50), rng.integers(20, 120), rng.integers(2, 30)
        text += f" Object {i}: a {color} {thing}, {x} cm to the side, {y} cm ahead, {h} cm tall."
        i += 1
    return text
