"""A tiny random Idefics3 / SmolVLM through the engine and the pool, token for token against transformers' generate:
alone, batched with requests about other images, from the prefix cache, with 0, 1 and 2 images, image splitting
on and off; image KV keyed by content (one pixel apart never shares); bad frames refused with nothing leaked."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from engine_helpers import make_engine
from idefics3_folders import hf_greedy, processor_inputs, random_image, reference_processor, write_folder
from transformers import AutoModelForImageTextToText

from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.idefics3.inputs import max_images
from oxygen_ros.models.registry import load_model

MAX_NEW = 24
QUESTIONS = ["What is on the table?", "Which object is closest to the robot?", "Is the path ahead clear?"]


class Setup:
    """One folder: our engine's bundle, transformers' model and processor for it."""

    def __init__(self, folder: Path, split: bool) -> None:
        self.bundle = load_model(str(folder), torch.device("cpu"), torch.float32)
        self.reference = AutoModelForImageTextToText.from_pretrained(folder).eval()
        self.processor = reference_processor(folder, split)

    def engine(self, **overrides) -> Engine:
        return make_engine(self.bundle, **overrides)

    def theirs(self, question: str, images: list[np.ndarray]) -> list[int]:
        inputs = processor_inputs(self.processor, question, images)
        return hf_greedy(self.reference, inputs, MAX_NEW, self.bundle.tokenizer.eos_token_ids)


def _request(question: str, images: list[np.ndarray], **kwargs) -> GenerateRequest:
    return GenerateRequest(question, observation=Observation(images=images),
                           sampling=SamplingParams(max_new_tokens=MAX_NEW), **kwargs)  # fmt: skip


@pytest.fixture(scope="module", params=[True, False], ids=["split", "no-split"])
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return Setup(write_folder(tmp_path_factory.mktemp("idefics3"), split=request.param), request.param)


@pytest.fixture(scope="module")
def images() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [random_image(rng, h, w) for h, w in [(70, 90), (120, 50), (64, 64), (30, 200)]]


def _assert_same(ours, theirs: list[int]) -> None:
    assert ours.ok, ours.message
    assert ours.token_ids == theirs[: len(ours.token_ids)], ours.text
    assert len(ours.token_ids) == len(theirs) or ours.finish_reason == "stop"
    assert len(set(theirs)) > 5  # not degenerate


@pytest.mark.parametrize("num_images", [0, 1, 2])
def test_alone_equals_transformers(setup: Setup, images: list[np.ndarray], num_images: int) -> None:
    engine = setup.engine(enable_prefix_caching=False)
    frames = images[:num_images]
    req = _request(QUESTIONS[0], frames)
    assert engine.encode(req) == processor_inputs(setup.processor, QUESTIONS[0], frames)["input_ids"][0].tolist()
    _assert_same(engine.generate([req])[0], setup.theirs(QUESTIONS[0], frames))
    assert engine.pool.num_free == engine.pool.num_blocks


def test_batched_with_other_images_equals_transformers(setup: Setup, images: list[np.ndarray]) -> None:
    engine = setup.engine(max_num_batched_tokens=128)  # prompts are chunked, image spans cut mid-way
    cases = [(QUESTIONS[i % 3], images[i : i + 1 + i % 2]) for i in range(4)] + [(QUESTIONS[1], [])]
    outputs = engine.generate([_request(q, frames) for q, frames in cases])
    for out, (question, frames) in zip(outputs, cases):
        _assert_same(out, setup.theirs(question, frames))
    assert engine.pool.num_used == 0
    assert engine.runner.image_features.encoder_runs == 4  # one pass per distinct set of frames


def test_same_frame_reuses_its_blocks_from_the_cache(setup: Setup, images: list[np.ndarray]) -> None:
    """Three tasks ask about one frame: the frame's tokens (ahead of every question) are computed once."""
    engine = setup.engine()
    frame = [images[0]]
    reqs = [_request(q, frame, task_type=t) for q, t in zip(QUESTIONS, ["vqa", "instruction", "navigation"])]
    first = engine.generate(reqs[:1])
    rest = engine.generate(reqs[1:])
    assert engine.runner.image_features.encoder_runs == 1  # one pass through the vision encoder for three tasks
    bs, first_ids = engine.config.block_size, engine.encode(reqs[0])
    image_end = max(i for i, t in enumerate(first_ids) if t == engine.bundle.model.config.image_token_id) + 1
    for req, out in zip(reqs, first + rest):
        _assert_same(out, setup.theirs(req.prompt, frame))
    assert first[0].reused_image_tokens == 0
    for req, out in zip(reqs[1:], rest):
        common = len(os.path.commonprefix([first_ids, engine.encode(req)]))
        assert common >= image_end
        assert out.reused_prefix_tokens == common // bs * bs >= image_end // bs * bs
        assert out.reused_image_tokens == _image_tokens_below(setup, req, out.reused_prefix_tokens) > 0


def _image_tokens_below(setup: Setup, req: GenerateRequest, end: int) -> int:
    """Positions before ``end`` inside the frame's image span (first to last image token) of transformers'
    processor's prompt."""
    ids = processor_inputs(setup.processor, req.prompt, req.observation.images)["input_ids"][0].tolist()
    image = [i for i, t in enumerate(ids) if t == setup.bundle.model.config.image_token_id]
    return max(0, min(image[-1] + 1, end) - image[0])


def test_one_pixel_apart_never_shares(setup: Setup, images: list[np.ndarray]) -> None:
    engine = setup.engine()
    frame = images[0]
    other = frame.copy()
    other[5, 7, 1] ^= 1
    engine.generate([_request(QUESTIONS[0], [frame])])
    out = engine.generate([_request(QUESTIONS[0], [other])])[0]
    prompt = engine.encode(_request(QUESTIONS[0], [other]))
    first_image = prompt.index(engine.bundle.model.config.image_token_id)
    assert out.reused_prefix_tokens <= first_image // engine.config.block_size * engine.config.block_size
    assert out.reused_image_tokens == 0
    _assert_same(out, setup.theirs(QUESTIONS[0], [other]))


def test_smolvlm_folder_equals_transformers(tmp_path: Path, images: list[np.ndarray]) -> None:
    """SmolVLMForConditionalGeneration with the processor files as the Hub ships them."""
    setup = Setup(write_folder(tmp_path / "smolvlm", split=True, smolvlm=True, seed=1), split=True)
    assert type(setup.reference).__name__ == "SmolVLMForConditionalGeneration"
    engine = setup.engine()
    cases = [(QUESTIONS[0], images[:1]), (QUESTIONS[2], images[1:3])]
    for out, (question, frames) in zip(engine.generate([_request(q, f) for q, f in cases]), cases):
        _assert_same(out, setup.theirs(question, frames))


@pytest.mark.parametrize(
    ("frames", "code", "message"),
    [
        ([np.zeros((0, 5, 3), np.uint8)], ErrorCode.INVALID_ARGUMENT, "empty"),
        ([np.zeros((8, 8, 4), np.uint8)], ErrorCode.INVALID_ARGUMENT, "HxWx3"),
        ([np.zeros((8, 8, 3), np.float32)], ErrorCode.INVALID_ARGUMENT, "uint8"),
        (["not an image"], ErrorCode.INVALID_ARGUMENT, "numpy array"),
        (None, ErrorCode.OUT_OF_RANGE, "more than the"),
    ],
    ids=["zero-size", "rgba", "float", "not-array", "too-many"],
)
def test_bad_frames_are_refused_and_nothing_leaks(setup: Setup, images: list[np.ndarray], frames, code, message) -> None:
    engine = setup.engine()
    if frames is None:
        frames = [images[3]] * (max_images(engine.bundle.model.config) + 1)
    with pytest.raises(EngineError) as caught:
        engine.submit(_request(QUESTIONS[0], frames))
    assert caught.value.code == code and message in caught.value.message, caught.value.message
    with pytest.raises(EngineError, match="placeholders"):  # a raw prompt must place one <image> per frame
        engine.submit(_request("<image><image> What is this?", images[:1], chat=False))
    engine.check_invariants()
    assert not engine.requests and engine.pool.num_free == engine.pool.num_blocks
    _assert_same(engine.generate([_request(QUESTIONS[0], images[:1])])[0], setup.theirs(QUESTIONS[0], images[:1]))
