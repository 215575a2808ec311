"""`bench --suite causal` at toy sizes: the causal-prompt approximation's chunk differs from the faithful one (the
same weights, ids and noise), the faithful path is the engine's, and the metrics are what docs/benchmarks.md quotes."""

import numpy as np
import torch

from oxygen_ros.bench import causal_suite
from oxygen_ros.bench.robot_frames import PROMPT, camera_image
from oxygen_ros.cli.bench import SUITES
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams


def test_causal_suite_measures_the_approximation():
    out = causal_suite.run(observations=1, images=1)
    m = out["metrics"]
    assert m["action_mse_causal_vs_faithful"] > 0 and m["action_mse_next_observation"] > 0
    assert m["causal_error_vs_observation_change"] == m["action_mse_causal_vs_faithful"] / m["action_mse_next_observation"]
    assert out["details"]["image_tokens"] == 256 and len(out["details"]["per_observation_mse"]) == 1
    assert SUITES["causal"] == "oxygen_ros.bench.causal_suite"


def test_faithful_chunk_is_the_engines():
    """The suite's faithful side (whole prefix bidirectional) is what the Engine serves for the same request."""
    engine = Engine(EngineConfig(model="pi05-random-tiny", kv_cache_bytes=64 << 20, max_model_len=2048))
    model, state, image = engine.bundle.model, [0.25, -0.5], camera_image(3)
    (out,) = engine.generate([GenerateRequest(PROMPT, task_id="a", task_type="instruction", want_text=False,
                                              want_actions=True, observation=Observation(images=[image], state=state),
                                              sampling=SamplingParams(seed=9))])  # fmt: skip
    prefix = model.observation_prefix(engine.tokenizer, PROMPT, [image], state)
    noise = torch.randn(50, 32, generator=torch.Generator().manual_seed(9))
    expected = causal_suite.chunk(model, prefix.token_ids, prefix.pixels, len(prefix.token_ids), noise)
    np.testing.assert_allclose(out.actions, expected.numpy(), atol=1e-5)
