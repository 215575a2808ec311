"""Memory pressure on the real SmolLM2: 12 tasks with revisited scenes on a pool a quarter of their working set.

It must finish (no out-of-memory), leak no block (the pool's invariants are checked after every step), answer
token for token what an unpressured pool answers (blocks come back from the exact host tier and the disk tier),
and attention-aware eviction must hit the pool at least as often as LRU.
"""

import pytest
from engine_helpers import make_engine

from oxygen_ros.bench.tiers_workload import pressure_pool_blocks, replay, robot_workload, working_set_blocks


@pytest.fixture(scope="module")
def workload(smollm2_bundle):
    return robot_workload(smollm2_bundle.tokenizer, rounds=9, scene_tokens=48, answer_tokens=4)


@pytest.fixture(scope="module")
def unpressured(smollm2_bundle, workload):
    engine = make_engine(smollm2_bundle, kv_cache_bytes=512 << 20, debug_checks=False)
    return engine, replay(engine, workload)


@pytest.fixture(scope="module")
def pressured(smollm2_bundle, workload, unpressured, tmp_path_factory):
    reference, _ = unpressured
    blocks = pressure_pool_blocks(reference, unpressured[1])
    bpb = reference.layout.bytes_per_block
    runs = {}
    for policy in ("lru", "attention"):
        engine = make_engine(
            smollm2_bundle, kv_cache_bytes=blocks * bpb, eviction_policy=policy, cpu_tier_bytes=blocks // 2 * bpb,
            cpu_tier_format="pool", disk_tier_path=str(tmp_path_factory.mktemp(policy)),
        )  # fmt: skip
        runs[policy] = engine, replay(engine, workload)
    return runs


def test_workload_shape(workload, unpressured):
    reference, outs = unpressured
    assert workload.num_tasks == 12 and len(outs) == workload.num_requests
    assert pressure_pool_blocks(reference, outs) == -(-working_set_blocks(reference) // 4)


@pytest.mark.parametrize("policy", ["lru", "attention"])
def test_pressure_keeps_every_answer_and_every_block(pressured, unpressured, policy):
    engine, outs = pressured[policy]
    _, expected = unpressured
    assert all(o.ok for o in outs)
    assert [o.token_ids for o in outs] == [o.token_ids for o in expected]
    assert [o.reused_prefix_tokens for o in outs] == [o.reused_prefix_tokens for o in expected]
    engine.check_invariants()
    assert engine.pool.num_used == 0 and engine.pool.evictions > 0
    gpu, cpu, disk = engine.stats().tiers
    assert cpu.hits + disk.hits > 0 and disk.blocks > 0


def test_attention_hits_the_pool_at_least_as_often_as_lru(pressured):
    rates = {policy: engine.pool.prefix_hit_rate for policy, (engine, _) in pressured.items()}
    assert rates["attention"] >= rates["lru"], rates
