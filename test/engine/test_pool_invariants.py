"""Randomised submit / step / abort sequences keep every pool invariant and leak nothing."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_helpers import make_engine
from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode

WORDS = ["red", "cup", "table", "left", "robot", "kitchen", "move", "the", "a", "blue", "door", "stop"]
OBSERVATIONS = [Observation(text=" ".join(WORDS[i:] + WORDS[:i]) * 6) for i in range(3)]

submit = st.tuples(
    st.just("submit"),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),
    st.sampled_from([None, *OBSERVATIONS]),
    st.integers(1, 24),
    st.integers(0, 2),
)
action = st.one_of(submit, st.tuples(st.just("step")), st.tuples(st.just("abort"), st.integers(0, 50)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(action, min_size=1, max_size=40), kv_blocks=st.integers(12, 40))
def test_random_operations_keep_invariants_and_free_everything(tiny_bundle, ops, kv_blocks):
    probe = make_engine(tiny_bundle)
    engine = make_engine(tiny_bundle, kv_cache_bytes=kv_blocks * probe.layout.bytes_per_block, max_model_len=512)
    submitted: list[str] = []
    for op in ops:
        if op[0] == "submit":
            _, words, obs, max_new, priority = op
            req = GenerateRequest(
                " ".join(words), observation=obs, priority=priority, sampling=SamplingParams(max_new_tokens=max_new)
            )
            try:
                submitted.append(engine.submit(req))
            except EngineError as exc:  # larger than the whole (tiny) pool: refused up front
                assert exc.code == ErrorCode.OUT_OF_RANGE
        elif op[0] == "step":
            engine.step()
        elif submitted:
            request_id = submitted[op[1] % len(submitted)]
            if request_id in engine.requests:
                engine.abort(request_id)
        engine.check_invariants()
        assert engine.pool.num_used <= engine.pool.peak_used <= engine.pool.num_blocks
    while engine.has_unfinished:
        engine.step()
    engine.check_invariants()
    assert engine.pool.num_used == 0
    assert engine.pool.num_free + engine.pool.num_cached == engine.pool.num_blocks


def test_pool_counts_and_double_free():
    pool = BlockPool(4)
    a = pool.allocate(3)
    pool.check_invariants([a])
    pool.register_hash(a[0], b"h0")
    pool.release(a)
    assert (pool.num_free, pool.num_cached, pool.num_used) == (3, 1, 0)
    assert pool.lookup(b"h0") == a[0]
    b = pool.allocate(4)  # takes the free blocks first, then evicts the cached one
    assert pool.evictions == 1 and pool.lookup(b"h0") is None
    pool.check_invariants([b])
    pool.release(b)
    try:
        pool.release([b[0]])
    except RuntimeError as exc:
        assert "double free" in str(exc)
    else:
        raise AssertionError("double free not detected")


def test_the_peak_is_the_most_blocks_ever_referenced_at_once():
    """What a pool had to hold (``peak_used``, the stats' ``peak_used_blocks``): fresh blocks and prefix hits on
    cached ones count, releases do not lower it."""
    pool = BlockPool(6)
    a = pool.allocate(2)
    pool.register_hash(a[0], b"h0")
    pool.release(a)
    assert (pool.num_used, pool.num_cached, pool.peak_used) == (0, 1, 2)
    pool.acquire(a[0])  # a prefix hit: the cached block is referenced again
    assert (pool.num_used, pool.peak_used) == (1, 2)
    b = pool.allocate(4)
    assert (pool.num_used, pool.peak_used) == (5, 5)
    pool.release([*b, a[0]])
    assert (pool.num_used, pool.peak_used) == (0, 5)
