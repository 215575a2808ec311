"""An observation shared by several tasks is prefilled once and its blocks are shared, not copied."""

from engine_helpers import make_engine
from oxygen_ros.bench.scene_text import observation_text
from oxygen_ros.models.interface import MultiModalSpan
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.request import Request
from oxygen_ros.engine.sampling_params import SamplingParams

QUESTIONS = [("vqa", "What is on the table?"), ("instruction", "Pick up the cup."), ("navigation", "Go to the door.")]


def _peak_used_blocks(engine, reqs):
    for r in reqs:
        engine.submit(r)
    peak = 0
    outs = []
    while engine.has_unfinished:
        outs += engine.step()
        peak = max(peak, engine.pool.num_used)
    return peak, outs


def test_three_tasks_share_one_800_token_observation(tiny_bundle):
    obs = Observation(observation_id="frame-1", text=observation_text(tiny_bundle.tokenizer, 800))
    reqs = [
        GenerateRequest(q, task_id=t, task_type=t, observation=obs, sampling=SamplingParams(max_new_tokens=8))
        for t, q in QUESTIONS
    ]
    alone = make_engine(tiny_bundle)
    one_peak, _ = _peak_used_blocks(alone, reqs[:1])
    one_prompt = len(alone.encode(reqs[0]))

    engine = make_engine(tiny_bundle)
    for r in reqs:
        engine.submit(r)
    engine.step()  # the first task prefills the observation; the others wait one step for its blocks
    engine.step()  # the others are admitted on the cached observation
    shared = [b for b in engine.pool.blocks if b.ref_count == 3]
    assert len(shared) >= 800 // engine.config.block_size
    stats = engine.stats()
    assert {t.task_id for t in stats.tasks} == {"vqa", "instruction", "navigation"}
    assert all(t.shared_blocks >= len(shared) for t in stats.tasks)
    peak = engine.pool.num_used
    outs = []
    while engine.has_unfinished:
        outs += engine.step()
        peak = max(peak, engine.pool.num_used)
    assert peak <= 1.2 * one_peak
    reused = sorted(o.reused_prefix_tokens for o in outs)
    assert reused[0] == 0 and reused[1] >= 800 and reused[2] >= 800
    prompt_tokens = sum(o.prompt_tokens for o in outs)
    decode_tokens = sum(o.generated_tokens - 1 for o in outs)
    assert engine.runner.tokens_computed == prompt_tokens - sum(reused) + decode_tokens
    assert engine.runner.tokens_computed < one_prompt + 2 * 64  # the observation went through the model once
    engine.check_invariants()
    assert engine.pool.num_used == 0


def test_same_placeholder_tokens_over_different_images_never_share(tiny_bundle):
    engine = make_engine(tiny_bundle)
    manager = engine.kv_manager
    placeholder = [7] * 48 + [11, 12, 13]

    def request(request_id: str, image_hash: bytes) -> Request:
        spans = [MultiModalSpan(0, 48, image_hash)]
        return Request(request_id, "t", "vqa", list(placeholder), SamplingParams(), mm_spans=spans)

    a, b, a2 = request("a", b"image-A"), request("b", b"image-B"), request("a2", b"image-A")
    assert manager.admit(a)
    a.num_computed_tokens = a.num_tokens
    manager.commit(a)
    assert manager.admit(b) and manager.admit(a2)
    assert not set(a.block_table) & set(b.block_table) and b.num_cached_tokens == 0
    assert a2.block_table[:3] == a.block_table[:3] and a2.num_cached_tokens == 48
    for r in (a, b, a2):
        manager.free(r)
    engine.pool.check_invariants()


def test_fork_shares_blocks_and_copies_the_partial_block_on_write(tiny_bundle):
    engine = make_engine(tiny_bundle)
    manager, bs = engine.kv_manager, engine.config.block_size
    parent = Request("p", "t", "generic", list(range(100, 100 + bs + 5)), SamplingParams())
    child = Request("c", "t", "generic", list(parent.prompt_token_ids), SamplingParams())
    assert manager.admit(parent)
    parent.num_computed_tokens = parent.num_tokens
    layer = engine.kv.layers[0]
    layer.blocks.k[parent.block_table[1]] = 1.0
    manager.fork(parent, child)
    assert child.block_table == parent.block_table
    assert engine.pool.blocks[parent.block_table[1]].ref_count == 2
    child.append_output(5)
    assert manager.reserve(child, 1)
    assert child.block_table[0] == parent.block_table[0]  # the full block stays shared
    assert child.block_table[1] != parent.block_table[1]  # the partial block was copied before the write
    assert bool((layer.blocks.k[child.block_table[1]] == 1.0).all())
    engine.pool.check_invariants([parent.block_table, child.block_table])
    manager.free(parent)
    manager.free(child)
    assert engine.pool.num_used == 0


def test_blocks_remember_which_task_types_read_them_after_their_requests_ended(tiny_bundle):
    """Tasks one after another, never overlapping: the observation's blocks are computed by the first and read by
    the other two from the cache, and the pool says so per block; a block whose KV is rewritten starts over."""
    obs = Observation(observation_id="frame-1", text=observation_text(tiny_bundle.tokenizer, 400))
    engine = make_engine(tiny_bundle)
    for t, q in QUESTIONS:
        sampling = SamplingParams(max_new_tokens=4)
        engine.submit(GenerateRequest(q, task_id=t, task_type=t, observation=obs, sampling=sampling))
        while engine.has_unfinished:
            engine.step()
        assert engine.pool.num_used == 0
    histogram = engine.stats().blocks_by_reader_types
    assert len(histogram) == 3 and histogram[2] >= 400 // engine.config.block_size
    engine.check_invariants()

    engine.pool.reset_prefix_cache()  # every cached block back to free: the next request writes new KV
    engine.submit(GenerateRequest("Hello", task_id="vqa", task_type="vqa", sampling=SamplingParams(max_new_tokens=2)))
    while engine.has_unfinished:
        engine.step()
    assert len(engine.stats().blocks_by_reader_types) == 1  # every block holding KV now read by one task type
