"""Token-for-token equality with transformers on the real SmolLM2 weights: alone, batched, and from the prefix cache."""

import os

import pytest
from engine_helpers import make_engine
from hf_reference import hf_greedy, hf_smollm2

from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams

MAX_NEW = 64
PROMPTS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write a haiku about a robot arm.",
    "Explain in one sentence what a KV cache is.",
    "How many legs does a spider have?",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 7?",
    "Give me a short tip for staying focused.",
    "Which planet is known as the red planet?",
    "Describe the color of the sky on a clear day.",
]
SCENE = (
    "A kitchen table seen from the robot's head camera. "
    + " ".join(
        f"Object {i}: a {c} {s} at {x} cm left and {y} cm ahead, {d} cm tall."
        for i, (c, s, x, y, d) in enumerate(
            [("red", "cup", 10, 40, 9), ("blue", "box", -20, 55, 12), ("green", "apple", 5, 30, 7),
             ("yellow", "banana", 30, 45, 4), ("white", "plate", 0, 35, 2), ("black", "phone", -10, 25, 1),
             ("orange", "ball", 25, 60, 6), ("purple", "book", -30, 50, 3), ("grey", "bottle", 15, 70, 22)]
        )
    )
)


@pytest.fixture(scope="module")
def requests_and_reference(smollm2_bundle):
    """Our prompts (chat-formatted) and transformers' greedy continuation of each, computed once."""
    model, tokenizer = hf_smollm2()
    engine = make_engine(smollm2_bundle)
    reqs = [GenerateRequest(p, sampling=SamplingParams(max_new_tokens=MAX_NEW)) for p in PROMPTS]
    reference = [hf_greedy(model, tokenizer, engine.encode(r), MAX_NEW) for r in reqs]
    return reqs, reference


def _assert_same(outputs, reference):
    for out, ref in zip(outputs, reference):
        assert out.ok
        assert out.token_ids == ref[: len(out.token_ids)], out.text
        assert len(out.token_ids) == len(ref) or out.finish_reason == "stop"


def test_one_at_a_time_equals_transformers(smollm2_bundle, requests_and_reference):
    reqs, reference = requests_and_reference
    engine = make_engine(smollm2_bundle, enable_prefix_caching=False)
    outputs = [engine.generate([r])[0] for r in reqs]
    _assert_same(outputs, reference)
    assert engine.pool.num_free == engine.pool.num_blocks


def test_mixed_length_batch_equals_transformers(smollm2_bundle, requests_and_reference):
    reqs, reference = requests_and_reference
    engine = make_engine(smollm2_bundle)
    _assert_same(engine.generate(reqs), reference)
    assert engine.pool.num_used == 0


def test_long_common_prefix_from_cache_equals_transformers(smollm2_bundle):
    model, tokenizer = hf_smollm2()
    engine = make_engine(smollm2_bundle)
    obs = Observation(text=SCENE)
    questions = ["What color is the cup?", "Where is the apple?", "Which object is tallest?", "Is there a phone?"]
    reqs = [GenerateRequest(q, observation=obs, sampling=SamplingParams(max_new_tokens=48)) for q in questions]
    reference = [hf_greedy(model, tokenizer, engine.encode(r), 48) for r in reqs]
    first = engine.generate(reqs[:1])
    rest = engine.generate(reqs[1:])
    _assert_same(first + rest, reference)
    first_ids = engine.encode(reqs[0])
    bs = engine.config.block_size
    for req, out in zip(reqs[1:], rest):  # every full block of the shared observation came from the cache
        common = len(os.path.commonprefix([first_ids, engine.encode(req)]))
        assert common > 200
        assert out.reused_prefix_tokens == common // bs * bs
