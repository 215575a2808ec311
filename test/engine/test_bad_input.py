"""Bad requests get a clear error code, allocate nothing, and the engine keeps serving."""

import math

import pytest
import torch

from engine_helpers import make_engine
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.registry import load_model

BAD = [
    (GenerateRequest("   "), ErrorCode.INVALID_ARGUMENT, "empty"),
    (GenerateRequest("hi", task_type="dance"), ErrorCode.INVALID_ARGUMENT, "unknown task type"),
    (GenerateRequest("hi", sampling=SamplingParams(max_new_tokens=0)), ErrorCode.INVALID_ARGUMENT, "max_new_tokens"),
    (GenerateRequest("hi", sampling=SamplingParams(max_new_tokens=10**9)), ErrorCode.OUT_OF_RANGE, "exceeds the context"),
    (GenerateRequest("hi " * 5000), ErrorCode.OUT_OF_RANGE, "exceeds the context"),
    (GenerateRequest("hi", sampling=SamplingParams(temperature=math.nan)), ErrorCode.INVALID_ARGUMENT, "temperature"),
    (GenerateRequest("hi", want_actions=True), ErrorCode.FAILED_PRECONDITION, "no action head"),
    (GenerateRequest("hi", want_text=False), ErrorCode.INVALID_ARGUMENT, "neither text nor actions"),
]


@pytest.mark.parametrize(("request_", "code", "phrase"), BAD, ids=[b[2] for b in BAD])
def test_bad_request_is_refused_and_engine_keeps_serving(tiny_bundle, request_, code, phrase):
    engine = make_engine(tiny_bundle)
    with pytest.raises(EngineError) as err:
        engine.submit(request_)
    assert err.value.code == code and phrase in err.value.message
    assert engine.pool.num_free == engine.pool.num_blocks and not engine.requests
    (out,) = engine.generate([GenerateRequest("hello", sampling=SamplingParams(max_new_tokens=3))])
    assert out.ok and out.generated_tokens >= 1
    engine.check_invariants()


def test_prompt_larger_than_the_pool(tiny_bundle):
    probe = make_engine(tiny_bundle)
    engine = make_engine(tiny_bundle, kv_cache_bytes=4 * probe.layout.bytes_per_block)
    with pytest.raises(EngineError) as err:
        engine.submit(GenerateRequest("word " * 80))
    assert err.value.code == ErrorCode.OUT_OF_RANGE and "whole pool" in err.value.message


def test_queue_bound_and_abort_free_blocks(tiny_bundle):
    engine = make_engine(tiny_bundle, max_queue=2)
    ids = [engine.submit(GenerateRequest(f"q{i}", sampling=SamplingParams(max_new_tokens=50))) for i in range(2)]
    with pytest.raises(EngineError) as err:
        engine.submit(GenerateRequest("one too many"))
    assert err.value.code == ErrorCode.RESOURCE_EXHAUSTED
    engine.step()
    assert engine.pool.num_used > 0
    for request_id in ids:
        out = engine.abort(request_id)
        assert out.error_code == ErrorCode.CANCELLED and out.finish_reason == "abort"
    assert engine.pool.num_used == 0 and not engine.has_unfinished
    with pytest.raises(EngineError) as err:
        engine.abort(ids[0])
    assert err.value.code == ErrorCode.NOT_FOUND


def test_unknown_model_and_bad_config():
    with pytest.raises(EngineError) as err:
        load_model("no-such-model", torch.device("cpu"), torch.float32)
    assert err.value.code == ErrorCode.NOT_FOUND and "smollm2-135m" in err.value.message
    for bad in ({"block_size": 12}, {"kv_cache_memory_fraction": 0.0}, {"device": "tpu"}, {"dtype": "int3"}):
        with pytest.raises(EngineError) as err:
            EngineConfig.from_dict(bad)
        assert err.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(EngineError) as err:
        EngineConfig.from_dict({"blok_size": 16})
    assert "unknown engine parameter" in err.value.message
    with pytest.raises(EngineError) as err:
        Engine(EngineConfig(model="no-such-model"))
    assert err.value.code == ErrorCode.NOT_FOUND


def test_seeded_sampling_is_reproducible_across_batches(smollm2_bundle):
    engine = make_engine(smollm2_bundle)
    sampled = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, seed=42, ignore_eos=True)
    (alone,) = engine.generate([GenerateRequest("tell me a story", sampling=sampled)])
    others = [GenerateRequest(f"other {i}", sampling=SamplingParams(max_new_tokens=12)) for i in range(3)]
    batched = engine.generate([*others[:2], GenerateRequest("tell me a story", sampling=sampled), others[2]])[2]
    assert alone.token_ids == batched.token_ids and len(alone.token_ids) == 12
    reseeded = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, seed=7, ignore_eos=True)
    (other,) = engine.generate([GenerateRequest("tell me a story", sampling=reseeded)])
    assert other.token_ids != alone.token_ids


def test_stop_tokens_end_generation(tiny_bundle):
    engine = make_engine(tiny_bundle)
    (free,) = engine.generate([GenerateRequest("count", sampling=SamplingParams(max_new_tokens=6, ignore_eos=True))])
    stop_at = free.token_ids[2]
    params = SamplingParams(max_new_tokens=6, ignore_eos=True, stop_token_ids=[stop_at])
    (stopped,) = engine.generate([GenerateRequest("count", sampling=params)])
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[: free.token_ids.index(stop_at) + 1]
