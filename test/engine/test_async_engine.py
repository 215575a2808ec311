"""AsyncEngine: the engine on its own thread serves callers on many threads, answers every failure as an output,
survives an exception inside a step, and leaves no block behind."""

import resource
import threading
import time

import pytest
import torch
from engine_helpers import TINY, make_engine

from oxygen_ros.engine.async_engine import AsyncEngine
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.llama import LlamaModel
from oxygen_ros.models.registry import ModelBundle

TIMEOUT = 60


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _request(prompt: str, tokens: int = 4, **kwargs) -> GenerateRequest:
    return GenerateRequest(prompt, sampling=SamplingParams(max_new_tokens=tokens, ignore_eos=True), **kwargs)


def _assert_pool_clean(engine: AsyncEngine) -> None:
    """No request holds a block: the snapshot says so and the pool's own bookkeeping agrees."""
    pool = engine.stats().pool
    assert (pool.used_blocks, pool.active_requests, pool.queued_requests, pool.tasks) == (0, 0, 0, [])
    assert pool.free_blocks + pool.cached_blocks == pool.total_blocks
    engine.call(lambda e: e.check_invariants()).result(TIMEOUT)


@pytest.fixture
def serving(tiny_bundle):
    engines: list[AsyncEngine] = []

    def start(**overrides) -> AsyncEngine:
        engines.append(AsyncEngine(make_engine(tiny_bundle, **overrides)))
        return engines[-1]

    yield start
    for engine in engines:
        engine.shutdown(timeout=TIMEOUT)


def test_callers_on_many_threads_get_what_the_engine_computes(serving, tiny_bundle):
    engine = serving()
    prompts = [f"task {i} looks at the red cup" for i in range(12)]
    futures: list = [None] * len(prompts)

    def caller(i: int) -> None:
        futures[i] = engine.submit(_request(prompts[i], tokens=6, task_id=f"t{i % 3}"))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outputs = [f.result(TIMEOUT) for f in futures]
    expected = make_engine(tiny_bundle).generate([_request(p, tokens=6) for p in prompts])
    assert [o.error_code for o in outputs] == [None] * len(prompts)
    assert [o.token_ids for o in outputs] == [e.token_ids for e in expected]
    stats = engine.stats()
    assert stats.completed == len(prompts)
    assert stats.generated_tokens == sum(len(o.token_ids) for o in outputs) > 0
    _assert_pool_clean(engine)


@pytest.mark.parametrize(
    ("request_", "code", "phrase"),
    [
        (_request("   "), ErrorCode.INVALID_ARGUMENT, "empty"),
        (_request("hi", tokens=0), ErrorCode.INVALID_ARGUMENT, "max_new_tokens"),
        (_request("hi", task_type="dance"), ErrorCode.INVALID_ARGUMENT, "unknown task type"),
    ],
    ids=["empty", "zero-tokens", "task-type"],
)
def test_refused_requests_come_back_as_outputs(serving, request_, code, phrase):
    engine = serving()
    out = engine.submit(request_).result(TIMEOUT)  # never raises into the caller
    assert out.error_code == code and phrase in out.message
    assert engine.submit(_request("still serving")).result(TIMEOUT).ok
    assert engine.stats().errors == {code.value: 1}
    _assert_pool_clean(engine)


def test_duplicate_request_id_is_refused_without_losing_the_first(serving):
    engine = serving()
    first = engine.submit(_request("one", tokens=30, request_id="same"))
    second = engine.submit(_request("two", request_id="same"))
    assert second.result(TIMEOUT).error_code == ErrorCode.INVALID_ARGUMENT
    assert first.result(TIMEOUT).ok


def test_queue_over_its_bound_answers_resource_exhausted(serving):
    engine = serving(max_queue=2, max_num_seqs=1)
    futures = [engine.submit(_request(f"long {i}", tokens=300)) for i in range(10)]
    codes = [f.result(TIMEOUT).error_code for f in futures]
    # at most one running and two waiting while the burst arrives: the rest are refused, the accepted ones finish
    assert codes.count(ErrorCode.RESOURCE_EXHAUSTED) >= 7
    assert set(codes) == {None, ErrorCode.RESOURCE_EXHAUSTED}
    _assert_pool_clean(engine)


def test_requests_in_flight_are_bounded_on_the_callers_side(serving):
    """While the engine thread is busy (a long step; here a call holding it), submitted requests wait in its inbox
    with their decoded images: beyond max_queue + max_num_seqs in flight they are answered RESOURCE_EXHAUSTED at
    once on the caller's thread, and ``busy`` says so before a node decodes another request's images."""
    engine = serving(max_queue=2, max_num_seqs=1)
    gate = threading.Event()
    held = engine.call(lambda _engine: gate.wait(TIMEOUT))
    futures = [engine.submit(_request(f"burst {i}", tokens=4)) for i in range(10)]
    refused = [f for f in futures if f.done()]
    assert len(refused) == 7 and all(f.result().error_code == ErrorCode.RESOURCE_EXHAUSTED for f in refused)
    assert "3 requests in flight" in refused[0].result().message and "3 requests in flight" in engine.busy()
    gate.set()
    taken = [f.result(TIMEOUT) for f in futures if f not in refused]  # the engine's own queue bound judges them
    assert held.result(TIMEOUT) and taken[0].ok and all(o.ok or "queue full" in o.message for o in taken)
    assert engine.busy() == ""
    _assert_pool_clean(engine)


def test_a_task_cancel_also_cancels_its_requests_received_before_it_and_still_on_their_way(serving):
    """A node received a request of task "goal-7" and decodes its images while the goal ends and its task is
    cancelled: submitted after the cancel, it is answered CANCELLED, holding nothing; a request of that task received
    after the cancel, and one of another task, are served."""
    engine = serving()
    before = time.perf_counter()
    assert engine.abort_task("goal-7").result(TIMEOUT) == 0
    late = engine.submit(_request("narrate", tokens=4, task_id="goal-7"), received_at=before)
    again = engine.submit(_request("narrate", tokens=4, task_id="goal-7"))
    other = engine.submit(_request("answer", tokens=4, task_id="vqa"), received_at=before)
    out = late.result(TIMEOUT)
    assert out.error_code == ErrorCode.CANCELLED and "cancelled after it was received" in out.message
    assert again.result(TIMEOUT).ok and other.result(TIMEOUT).ok
    _assert_pool_clean(engine)


def _wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_abort_frees_blocks_at_once(serving):
    engine = serving()
    future = engine.submit(_request("a long answer", tokens=2000, request_id="long"))
    _wait_until(lambda: engine.stats().pool.used_blocks > 0, "the request holds blocks")
    engine.abort("long")
    engine.abort("no-such-request")  # ignored
    out = future.result(TIMEOUT)
    assert (out.error_code, out.finish_reason) == (ErrorCode.CANCELLED, "abort")
    _assert_pool_clean(engine)


def test_a_cancel_that_overtakes_its_submit_cancels_the_request_when_it_comes(serving):
    """A caller's cancel may reach the engine thread before its submit (the submit compiles a grammar on the caller's
    thread first): the request is answered CANCELLED when it comes, holding nothing; other ids are untouched, and a
    request without an id is never cancelled by an abort of ''."""
    engine = serving()
    engine.abort("early")
    engine.abort("")
    out = engine.submit(_request("a long answer", tokens=2000, request_id="early")).result(TIMEOUT)
    assert (out.error_code, out.generated_tokens) == (ErrorCode.CANCELLED, 0) and "before it reached" in out.message
    assert engine.submit(_request("the next one", request_id="later")).result(TIMEOUT).ok
    assert engine.submit(_request("no id at all")).result(TIMEOUT).ok
    _assert_pool_clean(engine)


def test_an_abort_that_fails_still_answers_its_caller(serving):
    """Freeing a request's blocks raises (a bug: a double free): its caller is answered INTERNAL all the same, not
    left waiting, and the engine serves the next request."""
    engine = serving()
    future = engine.submit(_request("a long answer", tokens=2000, request_id="long"))
    _wait_until(lambda: engine.stats().pool.used_blocks > 0, "the request holds blocks")
    real = engine.engine.abort

    def broken(request_id: str):
        raise RuntimeError("double free")

    engine.engine.abort = broken
    try:
        engine.abort("long")
        out = future.result(TIMEOUT)
    finally:
        engine.engine.abort = real
    assert out.error_code == ErrorCode.INTERNAL and out.message == "abort: RuntimeError: double free"
    assert engine.submit(_request("the next one")).result(TIMEOUT).ok


class FaultyLlama(LlamaModel):
    """The real tiny Llama, plus a switch that makes its next forward pass raise (a fault inside engine.step)."""

    fail_next = False

    def forward(self, *args, **kwargs):
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("injected fault in the forward pass")
        return super().forward(*args, **kwargs)


def test_exception_in_a_step_fails_its_requests_and_serving_goes_on(tiny_bundle):
    torch.manual_seed(0)
    model = FaultyLlama(TINY).eval()
    shape = (TINY.num_layers, TINY.num_kv_heads, TINY.head_dim, 4096)
    bundle = ModelBundle(model, tiny_bundle.tokenizer, "faulty", *shape)
    engine = AsyncEngine(make_engine(bundle))
    try:
        engine.submit(_request("warm the prefix cache", tokens=2)).result(TIMEOUT)
        model.fail_next = True
        outputs = [f.result(TIMEOUT) for f in [engine.submit(_request(f"doomed {i}", tokens=50)) for i in range(3)]]
        assert {(o.error_code, "injected fault" in o.message) for o in outputs} == {(ErrorCode.INTERNAL, True)}
        stats = engine.stats()
        assert stats.internal_errors == 3 and "injected fault" in stats.last_error
        assert stats.pool.cached_blocks == 0, "the prefix cache is dropped after a failed step"
        _assert_pool_clean(engine)
        assert engine.submit(_request("after the fault")).result(TIMEOUT).ok
        assert engine.running
    finally:
        engine.shutdown(timeout=TIMEOUT)


def test_a_fault_restoring_blocks_from_a_tier_leaves_no_block_behind(tiny_bundle):
    """A prompt evicted to the host tier comes back through ``tiers.promote``; that raising (a fault copying KV in)
    after the pool gave the request its blocks fails the request, and every block it was given is free again."""
    prompts = ["the red cup is on the table near the door " * 5, "a blue box sits on the shelf by the window " * 5]
    inner = make_engine(tiny_bundle)
    inner = make_engine(tiny_bundle, kv_cache_bytes=8 * inner.layout.bytes_per_block, cpu_tier_bytes=1 << 20,
                        cpu_tier_format="pool")  # fmt: skip
    promote = inner.tiers.promote

    def faulty(hashes, dst_ids):
        inner.tiers.promote = promote  # once
        raise RuntimeError("injected fault restoring blocks")

    engine = AsyncEngine(inner)
    try:
        for prompt in prompts:  # the second evicts the first into the host tier
            assert engine.submit(_request(prompt, tokens=2)).result(TIMEOUT).ok
        inner.tiers.promote = faulty
        out = engine.submit(_request(prompts[0], tokens=2)).result(TIMEOUT)
        assert out.error_code == ErrorCode.INTERNAL and "injected fault restoring blocks" in out.message
        _assert_pool_clean(engine)
        again = engine.submit(_request(prompts[0], tokens=2)).result(TIMEOUT)
        assert again.ok and inner.tiers.promote == promote
    finally:
        engine.shutdown(timeout=TIMEOUT)


def test_call_runs_on_the_engine_thread_and_returns_errors(serving):
    engine = serving()
    assert engine.call(lambda e: threading.current_thread().name).result(TIMEOUT) == "oxygen-engine"

    def broken(_engine):
        raise ValueError("caller's bug")

    with pytest.raises(ValueError, match="caller's bug"):
        engine.call(broken).result(TIMEOUT)
    assert engine.submit(_request("still serving")).result(TIMEOUT).ok


def test_idle_engine_thread_sleeps(serving):
    engine = serving()
    engine.submit(_request("one")).result(TIMEOUT)
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(0.5)
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 0.1


def test_shutdown_cancels_work_and_refuses_later_calls(tiny_bundle):
    engine = AsyncEngine(make_engine(tiny_bundle))
    running = engine.submit(_request("a long answer", tokens=2000))
    _wait_until(lambda: engine.stats().pool.used_blocks > 0, "the request holds blocks")
    engine.shutdown(timeout=TIMEOUT)
    assert not engine.running
    assert running.result(0).error_code == ErrorCode.CANCELLED
    assert engine.stats().pool.used_blocks == 0
    assert engine.submit(_request("late")).result(0).error_code == ErrorCode.UNAVAILABLE
    with pytest.raises(EngineError, match="shut down"):
        engine.call(lambda e: None).result(0)
