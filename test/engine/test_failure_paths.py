"""The engine's failure paths leave no KV block without an owner and no caller without an answer: a memory tier's
save failing during an eviction, an allocation failing after prefix hits were taken, the host tier's copy failing,
a disk the tier cannot delete from, a request whose blocks cannot be freed, a caller cancelling its future, one
failing abort among a task's, a step failing after one of its requests finished (that one is answered), and a
pool left inconsistent by any of them (reclaimed once no request holds a block).
Each fault is injected into the real engine (the tiny Llama, real pools and tiers)."""

import threading

import pytest
from engine_helpers import make_engine

from oxygen_ros.engine.async_engine import AsyncEngine
from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.engine.engine import StepFailed
from oxygen_ros.engine.host_tier import take_blocks
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.preemption import swap_key
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import ErrorCode

TIMEOUT = 60
PROMPTS = ["the red cup is on the table near the door " * 5, "a blue box sits on the shelf by the window " * 5]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _request(prompt: str, tokens: int = 2, **kwargs) -> GenerateRequest:
    return GenerateRequest(prompt, sampling=SamplingParams(max_new_tokens=tokens, ignore_eos=True), **kwargs)


def _check_clean(engine) -> None:
    engine.check_invariants()
    assert engine.pool.num_used == 0


def test_a_failed_save_of_evicted_blocks_loses_their_kv_not_the_blocks():
    pool = BlockPool(4)
    held = pool.allocate(4)
    for i, block_id in enumerate(held):
        pool.register_hash(block_id, bytes([i]))
    pool.release(held)  # all four cached

    def failing_save(block_ids, hashes):
        raise OSError("the tier's disk is full")

    pool.on_evict = failing_save
    with pytest.raises(OSError):
        pool.allocate(2)
    pool.check_invariants()
    assert (pool.num_free, pool.num_cached, pool.num_used) == (2, 2, 0)  # the two victims are free, not lost
    pool.on_evict = None
    assert len(pool.allocate(4)) == 4  # every unit can still be had


def test_a_double_free_changes_nothing():
    pool = BlockPool(4)
    a, b = pool.allocate(2)
    with pytest.raises(RuntimeError, match=r"double free of KV blocks \[" + str(b) + r"\]"):
        pool.release([a, b, b])
    assert pool.blocks[a].ref_count == pool.blocks[b].ref_count == 1  # not half released
    pool.release([a, b])
    pool.check_invariants()


def test_reclaim_all_frees_blocks_left_with_no_owner():
    pool = BlockPool(6)
    pool.allocate(3)  # three blocks whose owner is gone (a failed operation's)
    cached = pool.allocate(1)
    pool.register_hash(cached[0], b"h")
    pool.release(cached)
    pool.reclaim_all()
    pool.check_invariants()
    assert (pool.num_free, pool.lookup(b"h")) == (6, None)


def test_an_admission_whose_allocation_fails_gives_back_its_prefix_hits(tiny_bundle):
    engine = make_engine(tiny_bundle)
    assert engine.generate([_request(PROMPTS[0])])[0].ok  # its prompt's blocks cached
    pool, real = engine.pool, engine.pool.allocate

    def failing(n, fmt=0):
        raise RuntimeError("injected fault allocating")

    pool.allocate = failing
    try:
        engine.submit(_request(PROMPTS[0] + "and a green ball"))
        with pytest.raises(StepFailed, match="RuntimeError: injected fault allocating"):
            engine.step()
    finally:
        pool.allocate = real
    assert all(block.ref_count == 0 for block in pool.blocks)  # the hits it took are released
    engine.abort(next(iter(engine.requests)))
    _check_clean(engine)


def test_a_host_tier_copy_that_fails_gives_its_slots_back(tiny_bundle):
    inner = make_engine(tiny_bundle)
    engine = make_engine(tiny_bundle, kv_cache_bytes=8 * inner.layout.bytes_per_block, cpu_tier_bytes=1 << 20,
                         cpu_tier_format="pool")  # fmt: skip
    host = engine.tiers.host
    slots, real = len(host._free), host.mover.move

    def failing(*args):
        raise RuntimeError("injected fault copying to the host")

    host.mover.move = failing
    try:
        assert engine.generate([_request(PROMPTS[0])])[0].ok
        with pytest.raises(StepFailed, match="copying to the host"):  # the second evicts the first: its save fails
            engine.generate([_request(PROMPTS[1])])
    finally:
        host.mover.move = real
    assert len(host._free) == slots and not host._slots  # no slot lost
    for request_id in list(engine.requests):
        engine.abort(request_id)
    _check_clean(engine)


def test_a_disk_that_refuses_deletes_forgets_the_file_not_the_request(tiny_bundle, tmp_path, monkeypatch):
    engine = make_engine(tiny_bundle, disk_tier_path=str(tmp_path), disk_tier_bytes=1 << 20)
    tier = engine.tiers.disk
    request_id = engine.submit(_request(PROMPTS[0]))
    engine.step()
    _, layers, indices = engine.kv.read_blocks([engine.requests[request_id].block_table[0]])[0]
    tier.store(b"h" * 32, take_blocks(layers, indices[0]))
    assert tier.flush(10.0) and b"h" * 32 in tier and tier.used_bytes > 0  # a file now, not a queued block

    def read_only(self, missing_ok=False):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(type(tmp_path), "unlink", read_only)
    tier.discard(b"h" * 32)  # no raise
    assert tier.flush(10.0)  # the writer tried to delete it
    assert b"h" * 32 not in tier and tier.used_bytes == 0 and (tmp_path / f"{(b'h' * 32).hex()}.kvb").exists()


def test_a_request_whose_blocks_cannot_be_freed_leaves_the_engine(tiny_bundle):
    engine = make_engine(tiny_bundle)
    request_id = engine.submit(_request("a long answer", tokens=200))
    engine.step()
    kv = engine.scheduler.kv
    real = kv.free

    def failing(req):
        raise RuntimeError("injected fault freeing")

    kv.free = failing
    try:
        with pytest.raises(RuntimeError):
            engine.abort(request_id)
    finally:
        kv.free = real
    assert request_id not in engine.requests and not engine.has_unfinished  # no ghost every step would trip on
    # (its blocks have no owner now: AsyncEngine's recovery reclaims them, the test below)


def test_a_caller_cannot_cancel_its_future_and_the_engine_serves_on(tiny_bundle):
    engine = AsyncEngine(make_engine(tiny_bundle))
    try:
        future = engine.submit(_request("a long answer", tokens=50))
        assert not future.cancel()  # (abort cancels a request)
        assert future.result(TIMEOUT).ok
        assert engine.submit(_request("the next one")).result(TIMEOUT).ok and engine.running
    finally:
        engine.shutdown(timeout=TIMEOUT)


def test_one_failing_abort_among_a_tasks_requests_still_cancels_the_others(tiny_bundle):
    engine = AsyncEngine(make_engine(tiny_bundle))
    try:
        futures = [engine.submit(_request(f"answer {i}", tokens=2000, task_id="arm", request_id=f"r{i}"))
                   for i in range(3)]  # fmt: skip
        engine.call(lambda e: None).result(TIMEOUT)  # submitted
        kv = engine.engine.scheduler.kv
        real = kv.free

        def first_fails(req):
            if req.request_id == "r0":
                raise RuntimeError("injected fault freeing r0")
            return real(req)

        kv.free = first_fails
        try:
            assert engine.abort_task("arm").result(TIMEOUT) == 3
        finally:
            kv.free = real
        outs = [f.result(TIMEOUT) for f in futures]
        assert outs[0].error_code == ErrorCode.INTERNAL and "injected fault freeing r0" in outs[0].message
        assert [o.error_code for o in outs[1:]] == [ErrorCode.CANCELLED] * 2
        _serves_on_with_a_clean_pool(engine)  # r0's blocks were never freed, and no request holds them: reclaimed
    finally:
        engine.shutdown(timeout=TIMEOUT)


def _serves_on_with_a_clean_pool(engine: AsyncEngine) -> None:
    """After the recovery: the pool's invariants hold, no block is held, and the next request is served."""
    engine.call(lambda e: e.check_invariants()).result(TIMEOUT)
    assert engine.stats().pool.used_blocks == 0
    assert engine.submit(_request("the next one")).result(TIMEOUT).ok


def test_a_request_that_finished_before_its_step_failed_is_answered_and_the_rest_fail(tiny_bundle):
    inner, failed_batch = make_engine(tiny_bundle), []
    on_token = inner.outputs.on_token

    def faulty(req, token):
        if req.request_id == "long":
            failed_batch.extend(r.request_id for r in inner.last_batch.requests)
            raise RuntimeError("injected fault after a request finished")
        return on_token(req, token)

    inner.outputs.on_token = faulty
    engine, release = AsyncEngine(inner), threading.Event()
    try:
        gate = engine.call(lambda e: release.wait(TIMEOUT))  # both submitted before the first step
        # the long one waits a step for the prompt template's prefix the short one computes, then comes into the step
        # in which the short one decodes its second and last token, after it in the batch
        short = engine.submit(_request("a red cup", tokens=2, request_id="short"))
        long = engine.submit(_request("a blue box", tokens=50, request_id="long"))
        release.set()
        gate.result(TIMEOUT)
        done, failed = short.result(TIMEOUT), long.result(TIMEOUT)
        assert failed_batch == ["short", "long"]  # both in the step that raised, the short one first
        assert done.ok and done.finish_reason == "length" and len(done.token_ids) == 2  # answered as it finished
        assert failed.error_code == ErrorCode.INTERNAL and "injected fault after a request finished" in failed.message
        inner.outputs.on_token = on_token
        _serves_on_with_a_clean_pool(engine)
    finally:
        engine.shutdown(timeout=TIMEOUT)


def _swapping_engine(tiny_bundle):
    """A running request with a partial last block, in an engine that swaps preempted requests to an exact L1."""
    engine = make_engine(tiny_bundle, preemption_mode="swap", cpu_tier_bytes=1 << 20, cpu_tier_format="pool")
    request_id = engine.submit(_request(PROMPTS[0] + "and", tokens=50))
    engine.step()
    req = engine.requests[request_id]
    assert req.num_computed_tokens % engine.kv_manager.block_size, "the test needs a partial last block"
    return engine, req


def test_a_swap_save_that_fails_leaves_nothing_saved_under_the_requests_key(tiny_bundle):
    engine, req = _swapping_engine(tiny_bundle)
    tiers, save = engine.tiers, engine.tiers.save

    def fails_after_copying(keys, block_ids):
        save(keys, block_ids)  # every block copied out, the tail too, then the fault
        raise RuntimeError("injected fault after saving")

    tiers.save = fails_after_copying
    with pytest.raises(RuntimeError, match="injected fault after saving"):
        engine.kv_manager.preempt(req)
    tiers.save = save
    assert swap_key(req.request_id) not in tiers.host and req.request_id not in engine.kv_manager.swapped
    assert req.block_table  # still its own: the abort frees them
    engine.abort(req.request_id)
    _check_clean(engine)


def test_a_swap_in_that_fails_leaves_nothing_saved_under_the_requests_key(tiny_bundle):
    engine, req = _swapping_engine(tiny_bundle)
    engine.scheduler._preempt(req)  # noqa: SLF001 - a preemption, as the scheduler makes one under pressure
    tiers = engine.tiers
    assert swap_key(req.request_id) in tiers.host

    def failing(key, dst_id):
        raise RuntimeError("injected fault restoring the tail")

    tiers.restore_saved = failing
    with pytest.raises(StepFailed, match="injected fault restoring the tail"):
        engine.step()  # readmits it
    assert swap_key(req.request_id) not in tiers.host
    engine.abort(req.request_id)
    _check_clean(engine)
