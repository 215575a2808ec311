"""Several KV formats in one pool under one byte budget: unit accounting, and the engine serving tasks whose
observation prefix and own blocks are stored in different formats (the layer operations per kernel backend:
test/kernels/test_mixed_pool_kernels.py)."""

import numpy as np
import pytest
import torch
from engine_helpers import make_engine

from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.engine.eviction import LRUEviction
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.kv.layout import KVLayout, PoolLayout
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kernels import KVQuantSpec

BS, KVH, D = 16, 2, 32


def _layouts(*names: str) -> PoolLayout:
    return PoolLayout(tuple(KVLayout(1, KVH, D, BS, KVQuantSpec.parse(n).storage_dtype) for n in names))


def test_units_one_budget_for_blocks_of_every_width():
    pool = BlockPool(8, policy=LRUEviction(), units_per_block=(1, 4))
    wide = pool.allocate(1, fmt=1)
    narrow = pool.allocate(4, fmt=0)
    assert (pool.num_free, pool.num_used) == (0, 8)
    pool.check_invariants([wide, narrow])
    with pytest.raises(MemoryError):
        pool.allocate(1)
    for i, block in enumerate(narrow):
        pool.register_hash(block, bytes([i]))
    pool.release(narrow)  # cached, reusable
    assert (pool.num_cached, pool.num_available) == (4, 4)
    pool.check_invariants([wide])
    (second,) = pool.allocate(1, fmt=1)  # evicts all four narrow blocks for one wide one
    assert pool.evictions == 4 and pool.num_cached == 0 and len(pool.blocks[second].extra_units) == 3
    pool.check_invariants([wide, [second]])
    pool.release([wide[0], second])
    assert pool.num_free == 8
    pool.check_invariants()


def test_pool_layout_counts_units_and_bytes():
    mixed = _layouts("fp32", "int8", "fp16")
    assert [mixed.units_per_block(f) for f in range(3)] == [4, 1, 2]
    # int8 codes + bf16 key scales per channel + fp32 value scales per token
    assert mixed.unit_bytes == 2 * BS * KVH * D + 2 * KVH * D + 4 * BS * KVH
    fp32_alone = KVLayout(1, KVH, D, BS, torch.float32).bytes_per_block
    idle = 4 * (2 * KVH * D + 4 * BS * KVH)  # a wide block pays its four units' idle scales
    assert mixed.bytes_per_block(0) == fp32_alone + idle
    with pytest.raises(ValueError, match="single-format"):
        PoolLayout((KVLayout(1, KVH, D, BS, torch.int8, (0,)), KVLayout(1, KVH, D, BS, torch.float32)))


def test_mixed_pool_spills_to_the_tiers_and_restores(smollm2_bundle, tmp_path):
    """A pool of a few blocks under a full-precision observation / int8 navigation policy: evicted blocks of both
    formats go to L1 (int8) and L2, revisits are restored from there into each block's own format and answer as
    before, and a restarted engine finds them on disk."""
    policy = {"kv_observation_dtype": "fp32", "kv_task_dtypes": ["navigation=int8"]}
    expected = _ask(make_engine(smollm2_bundle, **policy))
    tiers = {"cpu_tier_bytes": 1 << 20, "disk_tier_path": str(tmp_path)} | policy
    engine = make_engine(smollm2_bundle, kv_cache_bytes=12 * 4 * make_engine(smollm2_bundle, **policy).pool_layout
                         .unit_bytes, **tiers)  # fmt: skip
    first = _ask(engine)
    narrow = engine.task_formats["navigation"]  # int8: one unit per block
    engine.pool.release(engine.pool.allocate(engine.pool.num_available, narrow))  # evict everything cached
    again = _ask(engine)
    for got in (first, again):
        assert [o.token_ids[:4] for o in got] == [o.token_ids[:4] for o in expected]
    assert engine.stats().tiers[1].hits > 0 and again[0].reused_prefix_tokens >= 2 * 16
    engine.check_invariants()
    engine.close()
    restarted = make_engine(smollm2_bundle, **tiers)
    assert [o.token_ids[:4] for o in _ask(restarted)] == [o.token_ids[:4] for o in expected]
    assert restarted.stats().tiers[2].hits > 0


OBSERVATION = Observation(text="A red cup stands on the left of the table, a blue box on the right, a door ahead.")
QUESTIONS = [("vqa", "What color is the cup?"), ("navigation", "Where is the door?"), ("vqa", "What is on the right?")]


def _ask(engine, questions=QUESTIONS, max_new: int = 12):
    requests = [GenerateRequest(q, task_id=t, task_type=t, observation=OBSERVATION, chat=True,
                                sampling=SamplingParams(max_new_tokens=max_new, ignore_eos=True))
                for t, q in questions]  # fmt: skip
    return engine.generate(requests)


def test_quantized_task_blocks_share_the_full_precision_observation(smollm2_bundle):
    """Per-content policy: the observation prefix at full precision, navigation's own blocks in int8.  The vqa
    answers are exactly the single-format pool's (which equal HF transformers, test_smollm2_vs_hf), navigation's
    starts like it and reuses the observation blocks vqa computed, no block leaks, and while both run the stats
    report each task's formats and bytes (an int8 block costs a quarter of an fp32 one)."""
    reference = _ask(make_engine(smollm2_bundle))
    engine = make_engine(smollm2_bundle, kv_observation_dtype="fp32", kv_task_dtypes=["navigation=int8"])
    assert engine.kv_dtype_name == "fp32+int8"
    outs = _ask(engine)
    assert outs[0].token_ids == reference[0].token_ids and outs[2].token_ids == reference[2].token_ids
    assert outs[1].token_ids[:2] == reference[1].token_ids[:2]
    assert outs[1].reused_prefix_tokens >= 2 * 16  # the full blocks of the system turn that holds the observation
    engine.check_invariants()
    assert engine.pool.num_used == 0
    for t, q in QUESTIONS[:2]:
        engine.submit(GenerateRequest(q, task_id=t, task_type=t, observation=OBSERVATION, chat=True))
    engine.step()
    tasks = {t.task_id: t for t in engine.stats().tasks}
    assert tasks["vqa"].kv_dtype == "fp32" and tasks["navigation"].kv_dtype == "fp32+int8"
    unit = engine.pool_layout.unit_bytes
    nav = [engine.pool.blocks[b] for r in engine.active_requests() if r.task_id == "navigation" for b in r.block_table]
    assert tasks["navigation"].bytes == sum(4 * unit if b.fmt == 0 else unit for b in nav)
    assert any(b.fmt == 1 for b in nav) and any(b.fmt == 0 for b in nav)


def test_pi05_image_prefix_at_full_precision_with_int8_text(pi05_tiny):
    rng = np.random.default_rng(0)
    obs = Observation(images=[rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(3)], state=[0.3])

    def run(**overrides):
        engine = make_engine(pi05_tiny, **overrides)
        request = GenerateRequest("pick up the cup", task_type="instruction", observation=obs, want_actions=True,
                                  sampling=SamplingParams(max_new_tokens=3, seed=5))
        return engine, engine.generate([request])[0]

    engine, out = run(kv_observation_dtype="fp32", kv_task_dtypes=["instruction=int8"])
    _, reference = run()
    assert out.ok and out.actions.shape == (10, 32)
    np.testing.assert_allclose(out.actions, reference.actions, atol=1e-3)
    assert out.token_ids == reference.token_ids


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"kv_task_dtypes": ["vqa"]}, "type=dtype"),
        ({"kv_task_dtypes": ["robot=int8"]}, "type=dtype"),
        ({"kv_task_dtypes": ["vqa=int8", "vqa=fp8"]}, "type=dtype"),
        ({"kv_task_dtypes": ["vqa=int9"]}, "kv_task_dtypes must be auto or a KV storage format"),
        ({"kv_observation_dtype": "fp4"}, "kv_observation_dtype must be auto or a KV storage format"),
        ({"kv_task_dtypes": ["vqa=int8"], "kv_full_precision_layers": [0]}, "single-format"),
        ({"kv_task_dtypes": ["vqa=int8"], "cpu_tier_bytes": 1 << 20, "cpu_tier_format": "pool"}, "use int8"),
    ],
)
def test_bad_mixed_configuration_is_rejected_at_startup(tiny_bundle, overrides, message):
    with pytest.raises(EngineError, match=message) as err:
        make_engine(tiny_bundle, **overrides)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT


def test_three_formats_under_pressure_answer_as_without_it(tiny_bundle):
    """int8 by default, fp16 navigation, fp32 observations: eight requests in a pool far smaller than they need at
    once are preempted (recomputed) and resumed, and answer token for token as in a roomy pool; no unit leaks."""
    policy = {"kv_dtype": "int8", "kv_task_dtypes": ["navigation=fp16"], "kv_observation_dtype": "fp32"}
    scenes = [Observation(text=f"Scene {i}: " + "a red cup, a blue box and an open door. " * 4) for i in range(2)]
    types = ["vqa", "navigation", "instruction", "navigation"]
    requests = [GenerateRequest(f"Question {i}: what is near the door?", task_id=f"t{i}", task_type=types[i % 4],
                                observation=scenes[i % 2], chat=True,
                                sampling=SamplingParams(max_new_tokens=24, ignore_eos=True))
                for i in range(8)]  # fmt: skip
    roomy = make_engine(tiny_bundle, **policy)
    assert len(roomy.pool_layout.formats) == 3
    expected = roomy.generate(requests)
    tight = make_engine(tiny_bundle, kv_cache_bytes=48 * roomy.pool_layout.unit_bytes, **policy)
    assert tight.pool.num_blocks == 48
    got = tight.generate(requests)
    assert [o.token_ids for o in got] == [o.token_ids for o in expected]
    assert tight.kv_manager.costs.recomputed > 0  # requests really were preempted
    tight.check_invariants()
    assert tight.pool.num_used == 0
