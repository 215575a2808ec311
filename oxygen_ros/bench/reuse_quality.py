"""What approximate observation reuse (``reuse_similarity_threshold``) costs in quality and saves in time.

The simulated room at 10 Hz while the robot drives slowly (20 cm/s, turning 0.2 rad/s): consecutive frames differ by
camera noise and a few centimetres of motion.  Every frame is served twice, by an exact engine (reuse off) and by
one with the threshold, on the same weights and seeds:

- pi05-causal-tiny: one action chunk per frame (its camera image + the robot state); the cost is the action error, mean
  |reused - exact| over the chunk relative to mean |exact|, averaged over the frames that were reused.
- SmolLM2 (text): the frame's scene description (``perception.describe``) is the observation, one question per
  frame.  A text model has no image KV: reuse serves the earlier frame's description (and so its KV), so the answer
  is the one the earlier frame would have got; the cost is the share of frames whose answer changed.

Both report the share of frames reused and the summed request latency of each engine.
"""

from typing import Any

import numpy as np

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation, RequestOutput
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.models.registry import ModelBundle
from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.describe import describe
from oxygen_ros.perception.source import SimSource

QUESTION = "Which object is closest to the robot?"


def driving_frames(count: int, seed: int = 3) -> list[np.ndarray]:
    source = SimSource(seed, 10.0, CameraModel(640, 480))
    source.command = (20.0, 0.2)
    return [source.next_frame()[1] for _ in range(count)]


def _serve(bundle: ModelBundle, threshold: float, requests: list[GenerateRequest]) -> tuple[list[RequestOutput], int]:
    """Each request alone, in order (a frame at a time); the outputs and how many observations were reused."""
    engine = Engine(EngineConfig(kv_cache_bytes=256 << 20, max_model_len=2048,
                                 reuse_similarity_threshold=threshold), bundle=bundle)  # fmt: skip
    outs = [engine.generate([greq])[0] for greq in requests]
    return outs, engine.similar_frames.reused if engine.similar_frames else 0


def _compare(bundle: ModelBundle, threshold: float, requests: list[GenerateRequest]) -> dict[str, Any]:
    exact, _ = _serve(bundle, 0.0, requests)
    approx, reused = _serve(bundle, threshold, requests)
    assert all(o.ok for o in exact + approx)
    return {
        "exact": exact,
        "approx": approx,
        "reuse_rate": reused / len(requests),
        "exact_ms": sum(o.latency_ms for o in exact),
        "reuse_ms": sum(o.latency_ms for o in approx),
    }


def _act(index: int, image: np.ndarray, state: list[float]) -> GenerateRequest:
    obs = Observation(f"f{index}", images=[image], state=state)
    sampling = SamplingParams(seed=index)
    return GenerateRequest("pick up the red star", "arm", observation=obs, want_actions=True, want_text=False,
                           sampling=sampling)  # fmt: skip


def _ask(index: int, image: np.ndarray) -> GenerateRequest:
    obs = Observation(f"f{index}", describe(image).text, [image])
    return GenerateRequest(QUESTION, "vqa", "vqa", obs, SamplingParams(max_new_tokens=12))


def measure(pi05: ModelBundle, smollm2: ModelBundle, threshold: float, frames: int) -> dict[str, Any]:
    images = driving_frames(frames)
    rng = np.random.default_rng(0)
    actions = _compare(pi05, threshold, [_act(i, im, rng.uniform(-1, 1, 8).round(3).tolist())
                                         for i, im in enumerate(images)])  # fmt: skip
    pairs = list(zip(actions.pop("approx"), actions.pop("exact"), strict=True))
    errors = [float(np.abs(a.actions - e.actions).mean() / np.abs(e.actions).mean()) for a, e in pairs]
    reused_errors = [err for err, (a, _) in zip(errors, pairs, strict=True) if a.reused_prefix_tokens > 0]
    actions |= {"action_error": float(np.mean(reused_errors)) if reused_errors else 0.0, "action_errors": errors}
    text = _compare(smollm2, threshold, [_ask(i, im) for i, im in enumerate(images)])
    changed = [a.text != e.text for a, e in zip(text.pop("approx"), text.pop("exact"), strict=True)]
    text |= {"answer_change_rate": sum(changed) / frames, "changed": changed}
    return {"threshold": threshold, "frames": frames, "pi05_tiny": actions, "smollm2": text}
