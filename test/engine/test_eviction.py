"""Eviction policies: LRU order, attention activity over a sliding window, and the engine feeding decode mass."""

import pytest
import torch
from engine_helpers import TINY, make_engine

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.model_runner import ATTENTION_MASS_EVERY
from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.engine.eviction import AttentionEviction, LRUEviction
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError


def _mass(ids: list[int], mass: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([ids]), torch.tensor([mass], dtype=torch.float32)


def _cache(pool: BlockPool, n: int) -> list[int]:
    """``n`` blocks made cached (hashed, released) in order 0..n-1."""
    ids = pool.allocate(n)
    for i in ids:
        pool.register_hash(i, i.to_bytes(32, "little"))
    for i in ids:
        pool.release([i])
    return ids


def test_lru_evicts_the_block_released_longest_ago():
    pool = BlockPool(4, policy=LRUEviction())
    ids = _cache(pool, 4)
    pool.acquire(ids[0])
    pool.release([ids[0]])  # block 0 is now the most recently released
    assert pool.allocate(2) == [ids[1], ids[2]]
    pool.check_invariants([[ids[1]], [ids[2]]])


def test_attention_keeps_a_read_block_over_fresher_unread_ones():
    policy = AttentionEviction(4, alpha=0.7, window=10)
    pool = BlockPool(4, policy=policy)
    ids = pool.allocate(4)
    policy.observe(*_mass([ids[0], ids[1]], [5.0, 0.5]))  # block 0 read a lot, block 1 a little, 2 and 3 never
    for i in ids:
        pool.register_hash(i, i.to_bytes(32, "little"))
        pool.release([i])
    assert policy.pop_victims(4) == [ids[2], ids[3], ids[1], ids[0]]


def test_activity_leaves_the_window_and_reassigned_blocks_forget_it():
    policy = AttentionEviction(3, alpha=1.0, window=2)
    policy.observe(*_mass([0], [4.0]))
    policy.observe(*_mass([1], [1.0]))
    for block_id in (0, 1, 2):
        policy.add(block_id)
    assert policy.priorities(torch.arange(3).numpy()).tolist() == [1.0, 0.5, 0.0]
    policy.observe(*_mass([2], [1.0]))  # step 1 (block 0's mass) leaves the window of 2 steps
    assert policy.priorities(torch.arange(3).numpy()).tolist() == [0.0, 1.0, 1.0]
    policy.reset(1)  # block 1 gets new content: the mass its old content received is gone ...
    policy.observe(*_mass([0], [0.5]))  # ... and step 2 leaving the window later must not drive it negative
    assert policy._activity[1] == 0.0 and policy.priorities(torch.arange(3).numpy()).tolist() == [0.5, 0.0, 1.0]


def test_decode_steps_feed_attention_mass_to_the_policy(tiny_bundle):
    engine = make_engine(tiny_bundle, eviction_policy="attention")
    seen = []
    observe = engine.pool.policy.observe
    engine.runner.on_block_mass = lambda tables, mass: (seen.append(mass.clone()), observe(tables, mass))
    new_tokens = 2 * ATTENTION_MASS_EVERY + 2
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    engine.generate([GenerateRequest("one two three " * 12, sampling=sampling)])
    # the first token comes from the prefill; of the decode steps that follow, the first of every ATTENTION_MASS_EVERY
    measured = -(-(new_tokens - 1) // ATTENTION_MASS_EVERY)
    assert len(seen) == measured == 3
    heads_x_layers = TINY.num_heads * TINY.num_layers
    for mass in seen:
        assert mass.sum().item() == pytest.approx(heads_x_layers, rel=1e-5)  # every step's probabilities sum to 1
    assert engine.pool.policy._activity.sum() == pytest.approx(measured * heads_x_layers, rel=1e-5)


def test_lru_engine_gathers_no_mass(tiny_bundle):
    engine = make_engine(tiny_bundle, eviction_policy="lru")
    assert engine.runner.on_block_mass is None


@pytest.mark.parametrize(
    "field, value",
    [("eviction_policy", "fifo"), ("eviction_alpha", 1.5), ("eviction_history_window", 0), ("cpu_tier_format", "x"),
     ("cpu_tier_bytes", -1), ("prefetch_degree", -1), ("disk_tier_bytes", 0)],
)  # fmt: skip
def test_bad_memory_settings_are_rejected(field, value):
    with pytest.raises(EngineError, match=field):
        EngineConfig(**{field: value}).validate()
