"""The OxyGen paper's per-frame workload for pi0.5: every frame a new camera observation, one action request and the
language requests that arrived with it (uniform or Poisson), all with the same prompt so the language requests share
the whole prefix the action request prefilled, as pi0.5's language head and action expert share one prefix."""

import numpy as np

from oxygen_ros.bench.frames import Frame
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams

PROMPT = "pick up the red cup and put it in the sink"
ARRIVALS = ("uniform", "poisson")


def camera_image(seed: int, size: int = 224) -> np.ndarray:
    """A random RGB frame: content only matters for the prefix-cache key, so every frame's is new."""
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def language_arrivals(pattern: str, rate: float, frames: int, seed: int = 0) -> list[int]:
    """Language requests arriving in each frame: ``rate`` per frame on average, evenly spread or Poisson."""
    if pattern == "uniform":
        return [int((i + 1) * rate) - int(i * rate) for i in range(frames)]
    if pattern == "poisson":
        return np.random.default_rng(seed).poisson(rate, frames).tolist()
    raise ValueError(f"arrival pattern must be one of {ARRIVALS}, got {pattern!r}")


def robot_frames(
    arrivals: list[int], max_new_tokens: int, images: int = 3, prompt: str = PROMPT, seed: int = 0
) -> list[Frame]:
    """One frame per entry of ``arrivals``; action noise and images are seeded by the frame, so every mode gets the
    same requests.  Language requests decode exactly ``max_new_tokens`` greedy tokens (no early stop), as in the
    paper."""
    frames = []
    for i, count in enumerate(arrivals):
        rng = np.random.default_rng([seed, i])
        obs = Observation(
            observation_id=f"frame-{i}",
            images=[camera_image(int(rng.integers(2**31))) for _ in range(images)],
            state=rng.uniform(-1, 1, 8).round(3).tolist(),
        )
        action = GenerateRequest(
            prompt, task_id="policy", task_type="instruction", observation=obs, want_actions=True, want_text=False,
            sampling=SamplingParams(max_new_tokens=1, seed=seed * 100_003 + i),
        )  # fmt: skip
        text = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
        language = [GenerateRequest(prompt, task_id="language", observation=obs, sampling=text) for _ in range(count)]
        frames.append(Frame([action], language))
    return frames
