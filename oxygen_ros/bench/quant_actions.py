"""Action-side measurement of a quantized KV pool: pi05-causal-tiny action chunks with the prefix K/V read from the pool.

Every observation gets the same starting noise (one seed), so between two KV formats only the stored prefix differs,
and between two observations of one format only the observation does.  pi05-causal-tiny has random weights (no pi0.5
weights are available offline), so the action error is reported against two yardsticks of the same model: the
variance of the chunks and how much the chunks move when the observation (images and state) changes.
"""

import numpy as np
from tqdm import tqdm

from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams

PROMPT = "pick up the red cup and put it in the sink"
NOISE_SEED = 0


def observations(count: int, images_per_observation: int = 3, seed: int = 0) -> list[Observation]:
    """Deterministic camera frames (uniform noise images, 224x224) and a robot state per observation."""
    rng = np.random.default_rng(seed)
    return [
        Observation(
            images=[rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(images_per_observation)],
            state=rng.uniform(-1, 1, 8).round(3).tolist(),
        )
        for _ in range(count)
    ]


def action_chunks(engine: Engine, obs: list[Observation], label: str) -> np.ndarray:
    """One action chunk per observation, ``[len(obs), horizon, action_dim]``, one observation at a time."""
    sampling = SamplingParams(max_new_tokens=1, seed=NOISE_SEED)
    chunks = []
    for o in tqdm(obs, desc=f"pi05 actions {label}", unit="obs", leave=False):
        request = GenerateRequest(PROMPT, observation=o, want_actions=True, want_text=False, sampling=sampling)
        (out,) = engine.generate([request])
        chunks.append(out.actions)
    return np.stack(chunks)


def observation_change_mse(reference: np.ndarray) -> float:
    """Mean squared change of the chunk between consecutive observations (same noise, other images and state)."""
    return float(np.mean((reference[1:] - reference[:-1]) ** 2))
