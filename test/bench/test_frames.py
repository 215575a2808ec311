"""The cross-frame driver on pi05-causal-tiny: a paced action stream keeps its deadline while language decodes, VQA goes
ahead of older language, cancel / abort / a full queue leave no leaked blocks, and the paper's three modes compute
the same text and actions (only the cost differs)."""

import numpy as np
import pytest
from engine_helpers import action_frame_period, make_engine

from oxygen_ros.bench.robot_frames import robot_frames
from oxygen_ros.bench.scene_text import observation_text
from oxygen_ros.bench.frames import Frame, FrameDriver, Mode
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.request import RequestStatus
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode

def _no_leaks(engine) -> None:
    engine.check_invariants()
    assert engine.pool.num_used == 0 and not engine.has_unfinished


# more tokens than one frame holds: a frame leaves language about three action steps' time (the period is 4x the
# action step, or 10 Hz): ~25 decode steps of the six rows here (measured: 132-150 tokens a frame), so 240 each span
# every frame; 24 each could finish in the first frame once the six rows decoded in one C call
LONG_ANSWER = 240


def test_action_stream_keeps_its_deadline_while_six_language_requests_decode(pi05_tiny):
    period = action_frame_period(pi05_tiny)
    engine = make_engine(pi05_tiny)
    driver = FrameDriver(engine, Mode.CONTINUOUS_BATCHING, period_s=period, steps_per_frame=0, realtime=True)
    frames = robot_frames([6, 0, 0, 0], max_new_tokens=LONG_ANSWER, images=0)
    records = driver.run(frames)
    missed = [(r.index, r.actions[0].message if r.actions else "no answer") for r in records if not r.deadline_met]
    assert not missed, f"period {period * 1e3:.0f} ms: {missed}"
    assert all(r.actions[0].actions.shape == (10, 32) for r in records)
    assert sum(r.tokens_decoded > 0 for r in records) >= 2  # the language decoding ran across frames, between chunks
    driver.drain()
    language = [o for o in driver.outputs.values() if o.task_id == "language"]
    assert len(language) == 6 and all(o.ok and o.generated_tokens == LONG_ANSWER for o in language)
    _no_leaks(engine)


def _finish_order(pi05_tiny, late_task_type: str) -> list[str]:
    """Language request ids in the order they finished, when a request of ``late_task_type`` joins at frame 1
    behind four older ones; three seats, so some of the older ones are queued."""
    engine = make_engine(pi05_tiny, max_num_seqs=3, num_denoise_steps=2)
    driver = FrameDriver(engine, Mode.CONTINUOUS_BATCHING, steps_per_frame=2)
    frames = robot_frames([4, 0, 0], max_new_tokens=8, images=0)
    late = GenerateRequest(
        "what is on the table?", task_id="asker", task_type=late_task_type, request_id="late",
        observation=frames[1].actions[0].observation, sampling=SamplingParams(max_new_tokens=8, ignore_eos=True),
    )  # fmt: skip
    frames[1].language.append(late)
    records = [*driver.run(frames), driver.drain()]
    assert all(r.deadline_met for r in records[:-1])
    _no_leaks(engine)
    return [o.request_id for r in records for o in r.outputs if o.task_id != "policy"]


def test_vqa_submitted_mid_stream_is_answered_before_older_language_requests(pi05_tiny):
    fifo = _finish_order(pi05_tiny, "instruction")
    assert fifo[-1] == "late"  # an ordinary language request waits behind every older one
    vqa = _finish_order(pi05_tiny, "vqa")
    older_still_running = vqa[vqa.index("late") + 1 :]
    assert len(older_still_running) >= 2, vqa


def test_cancel_and_abort_free_every_block(pi05_tiny):
    engine = make_engine(pi05_tiny, max_num_seqs=3)
    driver = FrameDriver(engine, Mode.CONTINUOUS_BATCHING, steps_per_frame=2)
    frames = robot_frames([4, 1, 1], max_new_tokens=30, images=1)
    driver.run(frames[:2])
    running = [r for r in engine.active_requests() if r.status is RequestStatus.RUNNING]
    waiting = [r for r in engine.active_requests() if r.status is RequestStatus.WAITING]
    assert running and waiting
    pool = engine.pool
    for req in running:  # abort mid-decode: its own blocks are free at once, shared ones stay with the others
        own = sum(1 for b in req.block_table if pool.blocks[b].ref_count == 1)
        used = pool.num_used
        out = driver.cancel(req.request_id)
        assert out.error_code == ErrorCode.CANCELLED and 0 < out.generated_tokens < 30
        assert pool.num_used == used - own
        engine.check_invariants()
    for req in waiting:  # cancel before it got a seat
        assert driver.cancel(req.request_id).error_code == ErrorCode.CANCELLED
    _no_leaks(engine)
    record = driver.run_frame(frames[2])  # and the stream goes on
    assert record.deadline_met
    driver.drain()
    _no_leaks(engine)


def test_queue_over_its_bound_answers_resource_exhausted(pi05_tiny):
    engine = make_engine(pi05_tiny, max_queue=3, num_denoise_steps=2)
    driver = FrameDriver(engine, Mode.CONTINUOUS_BATCHING, steps_per_frame=2)
    frames = robot_frames([5, 1], max_new_tokens=4, images=0)
    first = driver.run_frame(frames[0])
    refused = [o for o in first.outputs if o.error_code == ErrorCode.RESOURCE_EXHAUSTED]
    assert len(refused) == 3 and all("queue full" in o.message for o in refused)  # action + 2 filled the queue
    assert first.deadline_met
    assert driver.run_frame(frames[1]).deadline_met
    driver.drain()
    accepted = [o for o in driver.outputs.values() if o.task_id == "language" and o not in refused]
    assert len(accepted) == 3 and all(o.ok and o.generated_tokens == 4 for o in accepted)
    _no_leaks(engine)


def _serve(bundle, mode: Mode, frames: list[Frame]) -> tuple[dict, int]:
    engine = make_engine(bundle)
    driver = FrameDriver(engine, mode, steps_per_frame=2)
    records = driver.run(frames)
    driver.drain()
    assert all(r.deadline_met for r in records)
    _no_leaks(engine)
    return driver.outputs, engine.runner.tokens_computed


@pytest.fixture(scope="module")
def pi05_by_mode(pi05_tiny):
    frames = robot_frames([1, 2], max_new_tokens=5, images=1)
    return {mode: _serve(pi05_tiny, mode, frames) for mode in Mode}


def test_three_modes_give_identical_actions_and_greedy_text(pi05_by_mode):
    baseline, _ = pi05_by_mode[Mode.BASELINE]
    assert len(baseline) == 5 and all(o.ok for o in baseline.values())
    for mode in (Mode.SHARED_KV, Mode.CONTINUOUS_BATCHING):
        outputs, _ = pi05_by_mode[mode]
        assert outputs.keys() == baseline.keys()
        for request_id, out in outputs.items():
            if out.actions is None:
                assert out.token_ids == baseline[request_id].token_ids and len(out.token_ids) == 5
            else:
                np.testing.assert_allclose(out.actions, baseline[request_id].actions, atol=1e-5)
    chunks = [o.actions for o in baseline.values() if o.actions is not None]
    assert not np.allclose(chunks[0], chunks[1])  # each frame's new image changes the chunk: the prefix KV matters


def test_only_the_baseline_prefills_the_observation_twice(pi05_by_mode):
    (baseline, base_cost), (shared, shared_cost), (batched, batched_cost) = pi05_by_mode.values()
    assert all(o.reused_prefix_tokens == 0 for o in baseline.values())  # isolated: its own cache salt per request
    text = [i for i, o in shared.items() if o.actions is None]
    assert all(shared[i].reused_prefix_tokens >= 256 and batched[i].reused_prefix_tokens >= 256 for i in text)
    assert shared_cost == batched_cost < base_cost - 3 * 256  # the three language requests' image tokens


def test_three_modes_give_identical_greedy_text_on_a_real_language_model(smollm2_bundle):
    """pi05-causal-tiny's random weights echo their last prompt token; SmolLM2's text depends on the whole context."""
    frames = []
    for i, questions in enumerate([["What is on the table?", "Which object is the tallest?"], ["Name a red object."]]):
        scene = Observation(text=observation_text(smollm2_bundle.tokenizer, 40, seed=i))
        params = SamplingParams(max_new_tokens=4, ignore_eos=True)
        language = [GenerateRequest(q, task_id="language", observation=scene, sampling=params) for q in questions]
        frames.append(Frame([], language))
    texts = {mode: {i: o.text for i, o in _serve(smollm2_bundle, mode, frames)[0].items()} for mode in Mode}
    assert texts[Mode.SHARED_KV] == texts[Mode.BASELINE] == texts[Mode.CONTINUOUS_BATCHING]
    assert len(set(texts[Mode.BASELINE].values())) == 3, texts  # the answers differ: the text carries information


def test_driver_refuses_an_adaptive_budget_without_a_period(pi05_tiny):
    engine = make_engine(pi05_tiny)
    for kwargs in ({"steps_per_frame": 0}, {"realtime": True}, {"period_s": -1.0}):
        with pytest.raises(EngineError) as err:
            FrameDriver(engine, Mode.CONTINUOUS_BATCHING, **kwargs)
        assert err.value.code == ErrorCode.INVALID_ARGUMENT
