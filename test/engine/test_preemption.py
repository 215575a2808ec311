"""Preemption on the real SmolLM2 (``bench.preemption_workload``): four requests decode in a pool that cannot hold them
all at full length, so the scheduler preempts; swapped (to an exact host tier) or recomputed, every request must
answer token for token what it answers in a roomy pool, leak no block and leave nothing of a swap behind.  Also the
per-request choice of ``auto``."""

import pytest
from engine_helpers import make_engine

from oxygen_ros.bench.preemption_workload import POOL_BLOCKS, run_preemption
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.preemption import PreemptionCosts, swap_key
from oxygen_ros.errors import EngineError, ErrorCode


@pytest.fixture(scope="module")
def roomy(smollm2_bundle):
    return run_preemption(make_engine(smollm2_bundle))


@pytest.mark.parametrize("mode", ["swap", "recompute"])
def test_preempted_requests_resume_with_identical_greedy_output(smollm2_bundle, roomy, mode):
    tier = {"cpu_tier_bytes": 64 << 20, "cpu_tier_format": "pool"} if mode == "swap" else {}
    bpb = make_engine(smollm2_bundle, kv_cache_bytes=1 << 20).layout.bytes_per_block
    engine = make_engine(smollm2_bundle, kv_cache_bytes=POOL_BLOCKS * bpb, preemption_mode=mode, **tier)
    run = run_preemption(engine)
    assert run.token_ids == roomy.token_ids
    costs = engine.kv_manager.costs
    if mode == "swap":
        assert costs.swapped > 0 and costs.recomputed == 0
        assert run.computed_tokens == roomy.computed_tokens  # every swapped token came back: none computed twice
        assert costs.swap_bytes_per_s > 0
        host = engine.tiers.host
        assert not engine.kv_manager.swapped and not any(swap_key(f"req-{i}") in host for i in range(4))
    else:
        assert costs.recomputed > 0 and costs.swapped == 0
        assert run.computed_tokens > roomy.computed_tokens  # the preempted requests' tails were computed again
    engine.check_invariants()
    assert engine.pool.num_used == 0 and not engine.has_unfinished


def test_auto_chooses_per_request_from_the_measured_rates():
    costs = PreemptionCosts("auto", can_swap=True)
    assert costs.should_swap(1 << 20, 100)  # bytes/s unknown yet: swap once to measure it
    costs.observe_compute(1000, 1.0)  # 1000 tokens/s
    costs.observe_swap(1 << 30, 1.0)  # 1 GiB/s
    assert costs.should_swap(1 << 20, 100)  # 2 MiB moved in ~2 ms < 100 tokens in 100 ms
    assert not costs.should_swap(1 << 30, 100)  # 2 GiB in 2 s > 100 ms
    assert not costs.should_swap(0, 100)  # nothing to move
    assert not PreemptionCosts("auto", can_swap=False).should_swap(1, 10**6)  # no lossless host tier
    assert not PreemptionCosts("recompute", can_swap=True).should_swap(1, 10**6)
    assert PreemptionCosts("swap", can_swap=True).should_swap(1 << 30, 1)


def test_swap_needs_a_lossless_host_tier(tiny_bundle):
    with pytest.raises(EngineError, match="needs the L1 tier"):
        EngineConfig(preemption_mode="swap").validate()
    with pytest.raises(EngineError, match="mode must be auto, swap or recompute"):
        EngineConfig(preemption_mode="sometimes").validate()
    with pytest.raises(EngineError) as err:  # int8 L1 behind an fp32 pool would requantize the swapped KV
        make_engine(tiny_bundle, preemption_mode="swap", cpu_tier_bytes=1 << 20)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT
    assert make_engine(tiny_bundle, kv_dtype="int8", preemption_mode="swap", cpu_tier_bytes=1 << 20)  # int8 kept
    assert not make_engine(tiny_bundle, cpu_tier_bytes=1 << 20).kv_manager.costs.can_swap  # auto: recompute only
