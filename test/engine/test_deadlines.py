"""Deadlines and service classes in the engine core: a request that cannot be served in time ends DEADLINE_EXCEEDED
with its blocks freed; action requests are served first and language never preempts them."""

import math
import time

import pytest
from engine_helpers import make_engine

from oxygen_ros.bench.robot_frames import camera_image
from oxygen_ros.engine.io import GenerateRequest, Observation, RequestOutput
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode


def _action(deadline_s: float = 0.0, images: int = 0, seed: int = 0) -> GenerateRequest:
    obs = Observation(images=[camera_image(seed + i) for i in range(images)], state=[0.5, -0.5])
    return GenerateRequest(
        "grasp the handle", task_id="policy", task_type="instruction", observation=obs, want_actions=True,
        want_text=False, deadline_s=deadline_s, sampling=SamplingParams(max_new_tokens=1, seed=seed),
    )  # fmt: skip


def _no_leaks(engine) -> None:
    engine.check_invariants()
    assert engine.pool.num_used == 0 and not engine.has_unfinished


def test_deadline_passing_mid_decode_drops_the_request_and_frees_its_blocks(tiny_bundle):
    engine = make_engine(tiny_bundle)
    params = SamplingParams(max_new_tokens=500, ignore_eos=True)
    engine.submit(GenerateRequest("count to five hundred", deadline_s=2.0, sampling=params))  # 2 s: a busy CI
    assert engine.step() == [] and engine.pool.num_used > 0  # prefilled, first token out, deadline not yet passed
    time.sleep(2.1)
    (out,) = engine.step()
    assert out.error_code == ErrorCode.DEADLINE_EXCEEDED and out.finish_reason == "deadline"
    assert out.generated_tokens == 1 and "deadline passed" in out.message  # what it had, no more compute spent
    _no_leaks(engine)


def test_action_request_expired_before_it_ran_costs_no_compute(pi05_tiny):
    engine = make_engine(pi05_tiny)
    engine.submit(_action(deadline_s=1e-6, images=1))
    (out,) = engine.step()
    assert out.error_code == ErrorCode.DEADLINE_EXCEEDED and out.actions is None
    assert engine.runner.tokens_computed == 0
    _no_leaks(engine)


def test_action_chunk_finished_after_its_deadline_is_marked_late(pi05_tiny):
    engine = make_engine(pi05_tiny)
    engine.submit(_action(deadline_s=0.005, images=1))  # a SigLIP + 270-token prefill takes far longer on a CPU
    (out,) = engine.step()
    assert out.actions is not None and out.actions.shape == (10, 32)  # it was scheduled in time, so it ran
    assert out.error_code == ErrorCode.DEADLINE_EXCEEDED and "after its deadline" in out.message
    (timely,) = engine.generate([_action(deadline_s=60.0, seed=1)])
    assert timely.ok and timely.actions is not None
    _no_leaks(engine)


@pytest.mark.parametrize("deadline_s", [-1.0, math.nan, math.inf])
def test_bad_deadline_is_refused(tiny_bundle, deadline_s):
    engine = make_engine(tiny_bundle)
    with pytest.raises(EngineError) as err:
        engine.submit(GenerateRequest("hi", deadline_s=deadline_s))
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and "deadline_s" in err.value.message


def test_actions_are_served_at_once_in_a_full_pool_and_never_preempted_for_language(pi05_tiny):
    probe = make_engine(pi05_tiny)
    engine = make_engine(pi05_tiny, kv_cache_bytes=9 * probe.layout.bytes_per_block, num_denoise_steps=2)
    preempted: list[tuple[str, bool]] = []
    engine.scheduler.on_preempt = lambda req: preempted.append((req.request_id, req.want_actions))
    params = SamplingParams(max_new_tokens=40, ignore_eos=True)  # 3 blocks each at full length: 4 overfill the pool
    language = [engine.submit(GenerateRequest(f"describe shelf {i}", sampling=params)) for i in range(4)]
    done: dict[str, RequestOutput] = {}
    pool_full_on_arrival: list[bool] = []
    for step in range(300):
        if step % 7 == 3:
            pool_full_on_arrival.append(engine.pool.num_available == 0)
            action_id = engine.submit(_action(seed=step))
            outs = {o.request_id: o for o in engine.step()}
            assert action_id in outs  # the chunk came out of the very next step
        else:
            outs = {o.request_id: o for o in engine.step()}
        done |= outs
        if not engine.has_unfinished:
            break
    assert any(pool_full_on_arrival)  # so some chunk was served by preempting language
    assert preempted and not any(wants_actions for _, wants_actions in preempted)
    assert all(done[i].ok and done[i].generated_tokens == 40 for i in language)  # preempted language resumed
    assert all(o.ok and o.actions is not None for o in done.values() if o.task_id == "policy")
    _no_leaks(engine)
