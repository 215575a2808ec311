"""pi05-causal-tiny through the engine: the observation's image tokens are computed once and shared by every task, action
chunks equal the model driven by hand, and images are part of the prefix-cache key."""

import numpy as np
import pytest
import torch

from engine_helpers import make_engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.registry import load_model


@pytest.fixture(scope="module")
def pi05_bundle():
    torch.set_num_threads(1)  # tiny matmuls: one thread is fastest, and robust on a loaded 2-core machine
    return load_model("pi05-causal-tiny", torch.device("cpu"), torch.float32)


def _camera(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (240, 320, 3), dtype=np.uint8)


def _request(task: str, obs: Observation, want_text: bool = False, seed: int = 3) -> GenerateRequest:
    return GenerateRequest(
        f"{task}: do the task", task_id=task, task_type=task, observation=obs, want_actions=True, want_text=want_text,
        sampling=SamplingParams(max_new_tokens=4, seed=seed),
    )


def test_three_tasks_share_an_868_token_observation(pi05_bundle):
    engine = make_engine(pi05_bundle)
    obs = Observation(images=[_camera(i) for i in range(3)], state=[0.1, -0.2])
    reqs = [_request(t, obs, want_text=(t == "vqa")) for t in ("vqa", "instruction", "navigation")]
    outs = engine.generate(reqs)
    assert sorted(o.reused_prefix_tokens for o in outs) == [0, 768, 768]
    image_computations = engine.runner.tokens_computed - sum(o.prompt_tokens - 768 for o in outs) - 3  # -decode
    assert image_computations == 768  # every image token went through the backbone exactly once
    for out in outs:
        assert out.actions.shape == (10, 32) and np.isfinite(out.actions).all()
    assert outs[0].generated_tokens == 4 and outs[1].generated_tokens == 0
    engine.check_invariants()
    assert engine.pool.num_used == 0


def test_engine_actions_equal_the_model_driven_by_hand(pi05_bundle):
    from models.pi05_conftest import prefill

    engine = make_engine(pi05_bundle)
    obs = Observation(images=[_camera(7)])
    (out,) = engine.generate([_request("instruction", obs, seed=11)])
    model, kv = pi05_bundle.model, engine.kv
    prompt = engine.tokenizer.encode("instruction: do the task")
    prefix = model.embed_prefix(obs.images, prompt)
    blocks = list(range(-(-len(prefix.token_ids) // engine.config.block_size)))
    prefill(model, kv, prefix, blocks)
    noise = torch.randn(10, 32, generator=torch.Generator().manual_seed(11))[None]
    table = torch.tensor([blocks])
    expected = model.sample_actions(table, [len(prefix.token_ids)], kv, engine.denoise_steps, noise=noise)
    np.testing.assert_allclose(out.actions, expected[0].numpy(), atol=1e-5)


def test_different_images_never_share_blocks(pi05_bundle):
    engine = make_engine(pi05_bundle)
    a, b = Observation(images=[_camera(1)]), Observation(images=[_camera(2)])
    first = engine.generate([_request("instruction", a)])[0]
    other = engine.generate([_request("instruction", b)])[0]
    again = engine.generate([_request("instruction", a)])[0]
    assert first.reused_prefix_tokens == 0 and other.reused_prefix_tokens == 0  # same placeholder ids, new image
    assert again.reused_prefix_tokens == 256
    assert not np.allclose(first.actions, other.actions)
    np.testing.assert_allclose(first.actions, again.actions, atol=1e-5)


@pytest.mark.parametrize(
    ("image", "phrase"),
    [
        (np.full((64, 64, 3), np.nan, dtype=np.float32), "NaN"),
        (np.zeros((64, 64), dtype=np.uint8), "HxWx3"),
        (np.zeros((0, 64, 3), dtype=np.uint8), "empty"),
    ],
)
def test_bad_images_are_refused(pi05_bundle, image, phrase):
    engine = make_engine(pi05_bundle)
    with pytest.raises(EngineError) as err:
        engine.submit(_request("instruction", Observation(images=[image])))
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and phrase.lower() in err.value.message.lower()
    assert engine.pool.num_free == engine.pool.num_blocks and not engine.requests
