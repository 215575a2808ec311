"""pi0.5 from a LeRobot folder (``type: pi05``, LeRobot's key names, its processors' QUANTILES stats) through the
registry and the Engine (submit / step).  References we did not write: stock transformers PaliGemma (the prefix,
wholly bidirectional, and the language head) and a stock Gemma as the expert (adaRMS reduced to plain RMSNorm), run
with LeRobot's formulas (``lerobot/processor/normalize_processor.py`` QUANTILES, ``lerobot/policies/pi05/
processor_pi05.py`` state prompt, ``modeling_pi05.py`` Euler loop).  Also: the model called directly, the whole
prefix shared exactly for the same frame + instruction + state, the checkpoint's flow steps, bad inputs refused with
nothing leaked."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from engine_helpers import make_engine
from pi0_folders import camera
from pi05_folders import (
    ACTION_DIM, CHUNK, hf_modules, hf_prefix, hf_velocity, lerobot_euler, tiny_shapes, write_lerobot_folder,
    write_processor_files,
)  # fmt: skip
from transformers import AutoTokenizer

from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.models.pi05 import Pi05Model
from oxygen_ros.models.registry import ModelBundle, load_model

ATOL = RTOL = 1e-4  # fp32; measured max |engine - reference| 2.1e-5 on chunks up to 15 (robot units)
BLOCK, STEPS, ROBOT_DIMS = 16, 3, 5  # config.json: num_inference_steps 3, output_features.action.shape [5]
TASK, REORDERED = "put the cup on the plate", "put the plate on the cup"
STATE_Q = {"q01": [-1.0, -2.0, 0.0, 1.0], "q99": [1.0, 2.0, 1.6, 3.0]}  # robot units -> [-1, 1]
ACTION_Q = {"q01": [-3.0, 0.0, -1.0, 2.0, -0.5], "q99": [3.0, 10.0, 1.0, 4.0, 0.5]}
STATES = [[0.3, -1.2, 0.8, 2.0], [-0.5, 1.9, 1.5, 1.1]]


def quantile_norm(x: torch.Tensor, q: dict) -> torch.Tensor:
    """LeRobot's QUANTILES normalisation: 2 * (x - q01) / (q99 - q01) - 1."""
    q01, q99 = torch.tensor(q["q01"]), torch.tensor(q["q99"])
    return 2.0 * (x - q01) / (q99 - q01) - 1.0


def quantile_unnorm(x: torch.Tensor, q: dict) -> torch.Tensor:
    """Its inverse: (x + 1) * (q99 - q01) / 2 + q01."""
    q01, q99 = torch.tensor(q["q01"]), torch.tensor(q["q99"])
    return (x + 1.0) * (q99 - q01) / 2.0 + q01


def lerobot_prompt(task: str, state: list[float]) -> str:
    """Pi05PrepareStateTokenizerProcessorStep on the normalised fp32 state."""
    normed = quantile_norm(torch.tensor(state, dtype=torch.float32), STATE_Q).numpy()
    bins = np.digitize(normed, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1
    return f"Task: {task}, State: {' '.join(map(str, bins))};\nAction: "


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(stock PaliGemma, stock Gemma expert, heads, our bundle loaded by the registry, the folder)."""
    torch.set_num_threads(1)
    paligemma, gemma, heads = hf_modules(seed=2)
    folder = tmp_path_factory.mktemp("pi05-engine")
    texts = [lerobot_prompt(t, s) for t in (TASK, REORDERED) for s in STATES]
    write_lerobot_folder(folder, paligemma, gemma, heads, texts, num_inference_steps=STEPS,
                         output_features={"action": {"type": "ACTION", "shape": [ROBOT_DIMS]}})  # fmt: skip
    write_processor_files(folder, "QUANTILES", STATE_Q, ACTION_Q)
    with tiny_shapes():
        bundle = load_model(str(folder), torch.device("cpu"), torch.float32)
    return paligemma, gemma, heads, bundle, folder


def _request(text: str, images: list, state: list[float], seed: int = 5, task: str = "a",
             want_text: bool = False) -> GenerateRequest:  # fmt: skip
    return GenerateRequest(text, task_id=task, task_type="instruction", want_text=want_text, want_actions=not want_text,
                           observation=Observation(images=images, state=state),
                           sampling=SamplingParams(seed=seed, max_new_tokens=1))  # fmt: skip


def _noise(seed: int) -> torch.Tensor:
    """The engine's starting noise of a request with this seed (one draw from its own generator)."""
    return torch.randn(CHUNK, ACTION_DIM, generator=torch.Generator().manual_seed(seed))


def _reference_chunk(reference: tuple, task: str, cams: list, state: list[float], seed: int, steps: int):
    paligemma, gemma, heads, _, folder = reference
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(f"{tok.bos_token}{lerobot_prompt(task, state)}")["input_ids"]
    cache = hf_prefix(paligemma, cams, ids).cache
    chunk = lerobot_euler(lambda x, t: hf_velocity(gemma, heads, cache, x)[None], _noise(seed)[None], steps)[0]
    return quantile_unnorm(chunk[:, :ROBOT_DIMS], ACTION_Q)


@torch.no_grad()
def _direct_chunk(model: Pi05Model, bundle: ModelBundle, task: str, cams: list, state: list[float],
                  seed: int) -> torch.Tensor:  # fmt: skip
    """The model called directly: its prefix prefilled whole and bidirectional into a pool of its own, one chunk."""
    prefix = model.observation_prefix(bundle.tokenizer, task, cams, state)
    n = len(prefix.token_ids)
    blocks = list(range(-(-n // BLOCK)))
    kv = KVCache(model.kv_layout(BLOCK, torch.float32), len(blocks), torch.device("cpu"))
    ctx, positions = kv.steps.batch([blocks], [0], [n], [n])
    embeds = model.embed_span(prefix.token_ids, 0, n, model.encode_images(prefix.pixels))
    model(torch.tensor(prefix.token_ids), positions, ctx, kv, input_embeds=embeds)
    return model.sample_actions(torch.tensor([blocks]), [n], kv, noise=_noise(seed)[None])[0]


def _assert_nothing_leaked(engine) -> None:
    engine.check_invariants()
    pool = engine.pool
    assert pool.num_used == 0 and not engine.requests
    assert pool.num_free + pool.num_used + pool.num_cached == pool.num_blocks


def test_actions_equal_the_references_in_robot_units(reference: tuple) -> None:
    """Two requests in one batch (two cameras / one), the checkpoint's 3 steps (EngineConfig leaves them to it):
    the chunk, cut to the robot's 5 dims and unnormalised, equals the stock modules run with LeRobot's formulas and
    the model called directly."""
    bundle = reference[3]
    engine = make_engine(bundle)
    assert engine.denoise_steps == STEPS == bundle.model.config.num_denoise_steps
    cameras, seeds = [[camera(1), camera(2)], [camera(3)]], [11, 12]
    outs = engine.generate([_request(TASK, c, s, seed, f"t{seed}") for c, s, seed in zip(cameras, STATES, seeds)])
    assert all(o.ok and o.finish_reason == "actions" and o.actions.shape == (CHUNK, ROBOT_DIMS) for o in outs)
    for out, cams, state, seed in zip(outs, cameras, STATES, seeds):
        expected = _reference_chunk(reference, TASK, cams, state, seed, STEPS)
        assert (expected - quantile_unnorm(torch.zeros(ROBOT_DIMS), ACTION_Q)).abs().max() > 0.5  # not degenerate
        torch.testing.assert_close(torch.from_numpy(out.actions), expected, atol=ATOL, rtol=RTOL)
        direct = _direct_chunk(bundle.model, bundle, TASK, cams, state, seed)
        torch.testing.assert_close(torch.from_numpy(out.actions), direct, atol=1e-5, rtol=1e-5)
    _assert_nothing_leaked(engine)



def test_cameras_named_by_key_reach_the_checkpoints_slots(reference: tuple) -> None:
    """Images that carry camera keys (a robot's order, a missing wrist camera) give the chunk of the checkpoint's
    slot order with that camera empty, as LeRobot orders its image features; unkeyed, the same images in the robot's
    order are another prefix. An action request without any camera image is refused, as LeRobot refuses it."""
    engine = make_engine(reference[3])
    keyed = _request(TASK, [camera(2), camera(1)], STATES[0], seed=7)
    keyed.observation.image_keys = ["right_wrist_0_rgb", "observation.images.base_0_rgb"]
    unkeyed = _request(TASK, [camera(2), camera(1)], STATES[0], seed=7, task="b")
    out, plain = engine.generate([keyed, unkeyed])
    expected = _reference_chunk(reference, TASK, [camera(1), None, camera(2)], STATES[0], 7, STEPS)
    torch.testing.assert_close(torch.from_numpy(out.actions), expected, atol=ATOL, rtol=RTOL)
    assert not np.allclose(plain.actions, out.actions)
    with pytest.raises(EngineError) as err:
        engine.submit(_request(TASK, [], STATES[0]))
    assert err.value.code == ErrorCode.FAILED_PRECONDITION and "no camera image" in err.value.message
    _assert_nothing_leaked(engine)

def _copy(reference: tuple, folder: Path) -> Path:
    for source in reference[4].iterdir():
        (folder / source.name).write_bytes(source.read_bytes())
    return folder


def test_relative_actions_get_the_raw_state_added_back_except_on_excluded_joints(reference: tuple,
                                                                                 tmp_path: Path) -> None:  # fmt: skip
    """A checkpoint trained on action - state (LeRobot's relative_actions_processor before its normalizer, the
    absolute_actions_processor after its unnormalizer): the chunk is the reference's unnormalized chunk plus the raw
    state on every dimension but the one its action_names call the gripper; a checkpoint whose config.json says
    use_relative_actions without the absolute step is refused at load; a state narrower than the relative dims is
    refused per request."""
    folder = _copy(reference, tmp_path)
    names = ["shoulder.pos", "elbow.pos", "wrist.pos", "roll.pos", "Gripper.pos"]
    write_processor_files(folder, "QUANTILES", STATE_Q, ACTION_Q, relative={"exclude_joints": ["gripper"],
                                                                          "action_names": names})  # fmt: skip
    with tiny_shapes():
        bundle = load_model(str(folder), torch.device("cpu"), torch.float32)
    engine = make_engine(bundle)
    (out,) = engine.generate([_request(TASK, [camera(1)], STATES[1], seed=9)])
    expected = _reference_chunk(reference, TASK, [camera(1)], STATES[1], 9, STEPS) + torch.tensor(STATES[1] + [0.0])
    torch.testing.assert_close(torch.from_numpy(out.actions), expected, atol=ATOL, rtol=RTOL)
    write_processor_files(folder, "QUANTILES", STATE_Q, ACTION_Q, relative={"exclude_joints": []})
    with tiny_shapes():
        every_dim = make_engine(load_model(str(folder), torch.device("cpu"), torch.float32))
    with pytest.raises(EngineError) as err:  # 5 relative dims, 4 state values
        every_dim.submit(_request(TASK, [camera(1)], STATES[1]))
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and "5 relative action dims" in err.value.message
    write_processor_files(folder, "QUANTILES", STATE_Q, ACTION_Q)
    config = json.loads((folder / "config.json").read_text()) | {"use_relative_actions": True}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineError) as err, tiny_shapes():
        load_model(str(folder), torch.device("cpu"), torch.float32)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and "use_relative_actions is true" in err.value.message
    _assert_nothing_leaked(engine)
    _assert_nothing_leaked(every_dim)

def test_engine_steps_override_the_checkpoints(reference: tuple) -> None:
    """EngineConfig.num_denoise_steps > 0 wins over config.json's num_inference_steps."""
    engine = make_engine(reference[3], num_denoise_steps=2)
    (out,) = engine.generate([_request(TASK, [camera(1)], STATES[0], seed=4)])
    expected = _reference_chunk(reference, TASK, [camera(1)], STATES[0], 4, 2)
    torch.testing.assert_close(torch.from_numpy(out.actions), expected, atol=ATOL, rtol=RTOL)


def test_whole_prefix_shared_only_for_the_same_frame_instruction_and_state(reference: tuple) -> None:
    """The region [images | prompt with the state] is keyed as a whole: the same frame + instruction + state
    reuses every full block (all but the last token, which is always computed) and gives the same chunk; another
    instruction of the same length, or another state, reuses nothing, not even the blocks of image placeholders.
    The language head decodes from the same shared prefix: its first greedy token is stock PaliGemma's."""
    paligemma, _, _, bundle, folder = reference
    engine = make_engine(bundle)
    frame = [camera(1), camera(2)]
    first = engine.generate([_request(TASK, frame, STATES[0], task="a")])[0]
    n = first.prompt_tokens
    assert first.reused_prefix_tokens == 0 and n > 2 * BLOCK + 1
    computed = engine.runner.tokens_computed
    again = engine.generate([_request(TASK, frame, STATES[0], task="b")])[0]
    assert again.reused_prefix_tokens == (n - 1) // BLOCK * BLOCK and again.reused_image_tokens == 2 * BLOCK
    assert engine.runner.tokens_computed - computed == n - again.reused_prefix_tokens
    np.testing.assert_array_equal(again.actions, first.actions)
    text = engine.generate([_request(TASK, frame, STATES[0], task="vqa", want_text=True)])[0]
    assert text.reused_prefix_tokens == again.reused_prefix_tokens
    tok = AutoTokenizer.from_pretrained(folder)
    logits = hf_prefix(paligemma, frame, tok(f"{tok.bos_token}{lerobot_prompt(TASK, STATES[0])}")["input_ids"]).logits
    assert text.token_ids == [int(logits[0, -1].argmax())]
    other = engine.generate([_request(REORDERED, frame, STATES[0], task="c")])[0]
    assert other.prompt_tokens == n and other.reused_prefix_tokens == 0
    moved = engine.generate([_request(TASK, frame, STATES[1], task="d")])[0]
    assert moved.reused_prefix_tokens == 0
    assert not np.allclose(moved.actions, first.actions) and not np.allclose(other.actions, first.actions)
    _assert_nothing_leaked(engine)


def test_a_repetition_penalty_over_an_image_prompt_penalizes_the_text_tokens_only(reference):
    """pi0.5's image placeholder id is the vocabulary's size (its images are embedded, never looked up): it has no
    logit, so the penalty leaves it out (transformers' own processor would index past the logits with it) and
    penalizes the prompt's text tokens as RepetitionPenaltyLogitsProcessor does; a batch beside it is unharmed."""
    from transformers import RepetitionPenaltyLogitsProcessor

    paligemma, _, _, bundle, folder = reference
    engine = make_engine(bundle)
    frame, penalty = [camera(1)], 3.0
    asked = _request(TASK, frame, STATES[0], task="vqa", want_text=True)
    asked.sampling = SamplingParams(max_new_tokens=1, repetition_penalty=penalty)
    text, chunk = engine.generate([asked, _request(TASK, frame, STATES[0], task="arm")])
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(f"{tok.bos_token}{lerobot_prompt(TASK, STATES[0])}")["input_ids"]
    logits = hf_prefix(paligemma, frame, ids).logits[:, -1]
    penalized = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([ids]), logits.clone())
    assert text.token_ids == [int(penalized[0].argmax())] and chunk.actions is not None
    _assert_nothing_leaked(engine)


BAD_INPUTS = [
    ("state not the stats' width", {"state": [0.1, 0.2, 0.3]}, "normalization stats have 4"),
    ("state too long", {"state": [0.0] * 7}, "1..6 values"),
    ("NaN state", {"state": [0.0, float("nan"), 0.0, 1.0]}, "NaN"),
    ("no state", {"state": []}, "needs the robot state"),
    ("too many images", {"images": [camera(i) for i in range(4)]}, "camera slots"),
]


@pytest.mark.parametrize(("name", "change", "phrase"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs_are_refused(reference: tuple, name: str, change: dict, phrase: str) -> None:
    engine = make_engine(reference[3])
    with pytest.raises(EngineError) as err:
        engine.submit(_request(TASK, change.get("images", [camera(1)]), change.get("state", STATES[0])))
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and phrase in err.value.message, err.value.message
    assert engine.pool.num_free == engine.pool.num_blocks
    _assert_nothing_leaked(engine)


def test_detected_by_config_type_and_refused_without_tokenizer(reference: tuple, tmp_path: Path) -> None:
    """``type: pi05`` picks the pi0.5 loader (not pi0's, not the text loader); its tokenizer is checked first."""
    folder = reference[4]
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(EngineError) as err:
        load_model(str(tmp_path), torch.device("cpu"), torch.float32)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and "tokenizer.json is missing" in err.value.message
