"""The scheduler's prefill cap (what the frame pacer sets while an arm runs): queued prompts are spread over several
steps, a step's first prompt still runs its whole bidirectional region however small the cap (so a cap never starves
a request), a cap of 0 makes a decode-only step, and the answers are the tokens an uncapped engine computes."""

import pytest
import torch
from engine_helpers import make_engine

from oxygen_ros.bench.robot_frames import robot_frames
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.models.registry import load_model

TOKENS = 6


@pytest.fixture(scope="module")
def faithful():
    """pi0.5 as it runs: its whole prefix (images and the question) is one bidirectional region."""
    return load_model("pi05-random-tiny", torch.device("cpu"), torch.float32)


def _ask(engine, count: int) -> list[str]:
    frames = robot_frames(list(range(count)), max_new_tokens=1, images=1, seed=5)
    sampling = SamplingParams(max_new_tokens=TOKENS, ignore_eos=True)
    return [engine.submit(GenerateRequest(f"What is on the table? ({i})", task_id=f"vqa-{i}",
                                          observation=frame.actions[0].observation, sampling=sampling))
            for i, frame in enumerate(frames)]  # fmt: skip


def _finish(engine, ids: list[str]) -> dict[str, list[int]]:
    outputs = {}
    while engine.has_unfinished:
        outputs |= {out.request_id: out.token_ids for out in engine.step()}
    return {i: outputs[i] for i in ids}


def test_a_cap_spreads_prompts_never_starves_them_and_zero_decodes_only(faithful, one_torch_thread):
    engine = make_engine(faithful)
    ids = _ask(engine, 3)
    prompts = [engine.requests[i].num_prompt_tokens for i in ids]
    assert all(engine.requests[i].bidirectional_len == n for i, n in zip(ids, prompts, strict=True))
    engine.step(prefill_cap=1)  # far below one prompt's region: the step's first prompt still runs, whole
    assert engine.last_batch.num_new_tokens == [prompts[0]]
    engine.step(prefill_cap=0)  # decode only: no new prompt starts
    assert [r.request_id for r in engine.last_batch.requests] == [ids[0]] and engine.last_batch.is_decode
    engine.step(prefill_cap=prompts[1] + 1)  # room for the next prompt (and the decode row), not for two
    assert sorted(engine.last_batch.num_new_tokens) == [1, prompts[1]]
    engine.step()  # no cap: the last prompt beside the two decode rows
    assert sorted(engine.last_batch.num_new_tokens) == [1, 1, prompts[2]]
    capped = _finish(engine, ids)
    engine.check_invariants()
    assert engine.pool.num_used == 0
    uncapped = make_engine(faithful)
    assert list(capped.values()) == list(_finish(uncapped, _ask(uncapped, 3)).values())
    assert all(len(tokens) == TOKENS for tokens in capped.values())


def test_a_prompt_the_cap_refuses_is_not_overtaken_by_a_smaller_one(faithful, one_torch_thread):
    engine = make_engine(faithful)
    first, big = _ask(engine, 2)
    (frame,) = robot_frames([9], max_new_tokens=1, images=0, seed=5)  # the state, no camera: a short prompt
    small = engine.submit(GenerateRequest("Hi?", task_id="vqa-state", observation=frame.actions[0].observation,
                                          sampling=SamplingParams(max_new_tokens=TOKENS, ignore_eos=True)))  # fmt: skip
    lengths = {i: engine.requests[i].num_prompt_tokens for i in (first, big, small)}
    assert lengths[small] < lengths[big]
    # room for the first question and the short prompt, not for the second question queued before the short one
    engine.step(prefill_cap=lengths[first] + lengths[small])
    assert [r.request_id for r in engine.last_batch.requests] == [first]
    assert engine.requests[big].num_computed_tokens == 0 and engine.requests[small].num_computed_tokens == 0
    _finish(engine, [first, big, small])
    engine.check_invariants()


def test_cached_observation_prefixes_count_as_computed_for_the_cap_and_the_pacer(one_torch_thread):
    """Questions about a frame another task already prefilled: their image region is in the pool, so the pacer's
    step estimate counts only their own tokens and a cap smaller than the region still admits several of them in
    one step (judged before admission, a waiting request used to look like its whole 256-token region)."""
    engine = make_engine(load_model("pi05-causal-tiny", torch.device("cpu"), torch.float32))
    frame = robot_frames([0], max_new_tokens=1, images=1, seed=5)[0].actions[0].observation
    sampling = SamplingParams(max_new_tokens=2, ignore_eos=True)

    def ask(i: int) -> str:
        return engine.submit(GenerateRequest(f"Question {i}: what is on the table?", task_id=f"vqa-{i}",
                                             observation=frame, sampling=sampling))  # fmt: skip

    first = ask(0)
    computed = list(engine.requests[first].prompt_token_ids)
    _finish(engine, [first])
    ids = [ask(1), ask(2)]
    region = engine.requests[ids[0]].bidirectional_len
    common = next(i for i, (a, b) in enumerate(zip(computed, engine.requests[ids[0]].prompt_token_ids)) if a != b)
    cached = common // 16 * 16  # the full blocks the first question's prompt has in common with theirs
    own = [engine.requests[i].num_prompt_tokens - cached for i in ids]
    assert cached >= region >= 256 and all(0 < n < 64 for n in own)
    assert engine.language_step_tokens(prefill_cap=sum(own)) == sum(own)
    engine.step(prefill_cap=sum(own))
    assert sorted(r.request_id for r in engine.last_batch.requests) == sorted(ids)
    assert sorted(engine.last_batch.num_new_tokens) == sorted(own)
    _finish(engine, ids)
    engine.check_invariants()
