"""pi0 from a checkpoint folder through the Engine (submit / step): action chunks equal transformers'
PI0ForConditionalGeneration.sample_actions on the same tiny random weights, prompt, state and noise; the whole
bidirectional prefix (frame + instruction) is shared exactly when both are identical; bad inputs refused, nothing
leaked."""

from pathlib import Path

import numpy as np
import pytest
import torch
from engine_helpers import make_engine
from pi0_folders import ACTION_DIM, CHUNK, STATE_DIM, STEPS, camera, hf_inputs
from transformers import AutoTokenizer, PI0ForConditionalGeneration

from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.registry import ModelBundle, load_model

ATOL = RTOL = 1e-5  # fp32; measured max |engine - transformers| 2.5e-6 on actions up to 4.1
BLOCK = 16  # = the tiny model's tokens per camera
TASK = "put the cup on the plate and stack the blocks"  # 16 prompt tokens: 2 cameras + prompt = 3 full blocks
REORDERED = "stack the blocks and put the cup on the plate"  # the same tokens in another order, the same length


@pytest.fixture(scope="module")
def bundle(pi0_folder: Path) -> ModelBundle:
    torch.set_num_threads(1)  # tiny matmuls: one thread is fastest, and steady, on a loaded 2-core machine
    return load_model(str(pi0_folder), torch.device("cpu"), torch.float32)


def _request(text: str, images: list[np.ndarray], state: list[float], seed: int = 5, task: str = "a") -> GenerateRequest:
    return GenerateRequest(text, task_id=task, task_type="instruction", want_text=False, want_actions=True,
                           observation=Observation(images=images, state=state), sampling=SamplingParams(seed=seed))


def _noise(seed: int) -> torch.Tensor:
    """The engine's starting noise of a request with this seed (one draw from its own generator)."""
    return torch.randn(CHUNK, ACTION_DIM, generator=torch.Generator().manual_seed(seed))


def _assert_nothing_leaked(engine) -> None:
    engine.check_invariants()
    pool = engine.pool
    assert pool.num_used == 0 and not engine.requests
    assert pool.num_free + pool.num_used + pool.num_cached == pool.num_blocks


def test_actions_equal_transformers(bundle: ModelBundle, pi0_hf: PI0ForConditionalGeneration, pi0_folder: Path) -> None:
    """Two requests in one batch: two cameras / one camera (the other slot missing), different prompts and states
    (shorter than max_state_dim), the checkpoint's 4 Euler steps.  transformers' prompt ids are PI0Processor's
    text line, ``f"{bos_token}{text}\\n"``, through transformers' own load of the folder's tokenizer (the processor
    itself needs torchvision, not installed here)."""
    engine = make_engine(bundle, num_denoise_steps=STEPS)
    cameras, texts = [[camera(1), camera(2)], [camera(3), None]], [TASK, "push the button"]
    states, seeds = [[0.3, -1.2, 0.8, 0.05], [1.5, -0.4, 0.0, 0.7, -2.0, 0.25]], [11, 12]
    outs = engine.generate([_request(t, [c for c in cams if c is not None], s, seed, f"task{seed}")
                            for t, cams, s, seed in zip(texts, cameras, states, seeds)])  # fmt: skip
    tok = AutoTokenizer.from_pretrained(pi0_folder)
    prompts = [tok(f"{tok.bos_token}{t}\n")["input_ids"] for t in texts]
    noise = torch.stack([_noise(s) for s in seeds])
    expected = pi0_hf.sample_actions(**hf_inputs(cameras, prompts, states), noise=noise)
    assert [o.prompt_tokens for o in outs] == [32 + len(prompts[0]) + 1, 16 + len(prompts[1]) + 1]  # + state token
    got = torch.tensor(np.stack([o.actions for o in outs]))
    assert got.shape == (2, CHUNK, ACTION_DIM) and all(o.ok and o.finish_reason == "actions" for o in outs)
    assert expected.abs().max() > 0.5 and (expected[0] - expected[1]).abs().max() > 0.5  # not degenerate
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL)
    _assert_nothing_leaked(engine)


def test_whole_prefix_shared_only_for_the_same_frame_and_instruction(bundle: ModelBundle) -> None:
    """pi0's prefix is bidirectional as a whole, so its blocks are keyed by frame AND instruction: the same pair
    reuses all 48 prefix tokens (only the state token is computed, through the action expert, and the chunk is the
    same); the same frame under another instruction of the same length reuses none, not even the blocks that hold
    only image placeholders."""
    engine = make_engine(bundle, num_denoise_steps=STEPS)
    frame, state = [camera(1), camera(2)], [0.3, -1.2, 0.8]
    first = engine.generate([_request(TASK, frame, state, task="a")])[0]
    region = first.prompt_tokens - 1
    assert region == 3 * BLOCK and first.reused_prefix_tokens == 0
    computed = engine.runner.tokens_computed
    again = engine.generate([_request(TASK, frame, state, task="b")])[0]
    assert again.reused_prefix_tokens == region and again.reused_image_tokens == 2 * BLOCK
    assert engine.runner.tokens_computed - computed == 1  # the state token alone
    np.testing.assert_array_equal(again.actions, first.actions)
    other = engine.generate([_request(REORDERED, frame, state, task="c")])[0]
    assert other.prompt_tokens == first.prompt_tokens and other.reused_prefix_tokens == 0
    moved = engine.generate([_request(TASK, frame, [0.9, 0.1, -0.5], task="d")])[0]
    assert moved.reused_prefix_tokens == region  # the state is not part of the bidirectional region
    assert not np.allclose(moved.actions, first.actions) and not np.allclose(other.actions, first.actions)
    _assert_nothing_leaked(engine)


def test_state_token_computed_in_a_later_step(bundle: ModelBundle) -> None:
    """A step budget that ends right after the prefix: the state token comes next step, alone, with the same
    chunk as when both are computed together."""
    frame, state = [camera(1), camera(2)], [0.3, -1.2, 0.8]
    together = make_engine(bundle, num_denoise_steps=STEPS).generate([_request(TASK, frame, state)])[0]
    engine = make_engine(bundle, num_denoise_steps=STEPS, max_num_batched_tokens=3 * BLOCK)
    engine.submit(_request(TASK, frame, state))
    assert engine.step() == [] and engine.runner.tokens_computed == 3 * BLOCK
    (split,) = engine.step()
    np.testing.assert_array_equal(split.actions, together.actions)
    _assert_nothing_leaked(engine)


BAD_INPUTS = [
    ("state too long", {"state": [0.0] * (STATE_DIM + 1)}, ErrorCode.INVALID_ARGUMENT, "1..6 values"),
    ("NaN state", {"state": [0.0, float("nan")]}, ErrorCode.INVALID_ARGUMENT, "NaN"),
    ("no state", {"state": []}, ErrorCode.INVALID_ARGUMENT, "needs the robot state"),
    ("too many images", {"images": [camera(i) for i in range(4)]}, ErrorCode.INVALID_ARGUMENT, "camera slots"),
    ("text", {"want_text": True}, ErrorCode.FAILED_PRECONDITION, "action chunks only"),
]


@pytest.mark.parametrize(("name", "change", "code", "phrase"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs_are_refused(bundle: ModelBundle, name: str, change: dict, code: ErrorCode, phrase: str) -> None:
    engine = make_engine(bundle)
    request = _request(TASK, change.get("images", [camera(1)]), change.get("state", [0.1]))
    request.want_text = change.get("want_text", False)
    with pytest.raises(EngineError) as err:
        engine.submit(request)
    assert err.value.code == code and phrase in err.value.message, err.value.message
    assert engine.pool.num_free == engine.pool.num_blocks
    _assert_nothing_leaked(engine)


def test_folder_without_tokenizer_is_refused_naming_it(pi0_folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / "no-tokenizer"
    copy.mkdir()
    for name in ("config.json", "model.safetensors"):
        (copy / name).write_bytes((pi0_folder / name).read_bytes())
    with pytest.raises(EngineError) as err:
        load_model(str(copy), torch.device("cpu"), torch.float32)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT
    assert f"{copy / 'tokenizer.json'} is missing" in err.value.message
    assert "google/paligemma-3b-pt-224" in err.value.message
