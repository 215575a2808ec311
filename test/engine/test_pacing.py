"""Frame pacing in the serving loop: the pacer learns an action stream's period from its arrivals and holds language
steps that would still run when the next chunk is due; on the engine thread (AsyncEngine, as the inference node runs
it) a 10 Hz action stream from another thread keeps its deadline while language decodes, with the same text."""

import math
import time
from dataclasses import replace

import pytest
import torch
from engine_helpers import make_engine

from oxygen_ros.bench.pacing_suite import language_requests, serve_stream
from oxygen_ros.bench.robot_frames import robot_frames
from oxygen_ros.engine.async_engine import AsyncEngine
from oxygen_ros.bench.frames import FrameDriver, Mode
from oxygen_ros.errors import ErrorCode
from oxygen_ros.engine.pacing import COALESCE_S, STALE_PERIODS, STEP_MEMORY, FramePacer

TIMEOUT = 120
LANGUAGE_TOKENS = 48
MAX_LANGUAGE_TOKENS = 400  # at most ~8 s of decode on this CPU (~20 ms a step)
FRAMES = 8


def _stream(pacer: FramePacer, period: float, count: int = 4, start: float = 100.0, name: str = "arm") -> float:
    """Feed ``count`` arrivals of stream ``name``, ``period`` apart; returns the last arrival time."""
    for i in range(count):
        pacer.action_arrived(name, start + i * period)
    return start + (count - 1) * period


def test_no_stream_never_holds():
    pacer = FramePacer()
    pacer.step_done(False, 0.5)
    assert pacer.hold_s(0.0) == 0.0
    pacer.action_arrived("arm", 0.0)  # one arrival: no period yet
    assert pacer.hold_s(0.01) == 0.0


def test_adaptive_holds_a_step_that_would_overrun_the_next_chunk():
    pacer = FramePacer(grace=0.25)
    last = _stream(pacer, 0.1)
    pacer.step_done(False, 0.03)  # language steps take 30 ms
    assert pacer.hold_s(last + 0.05) == 0.0  # ends at +80 ms, before the chunk due at +100 ms
    held = pacer.hold_s(last + 0.08)  # would end at +110 ms: hold until the chunk (released at +125 ms at most)
    assert held == pytest.approx(0.045)
    assert pacer.hold_s(last + 0.13) == 0.0  # the chunk is over a quarter period late: stop waiting for it


def test_a_prefill_bigger_than_recent_steps_is_judged_per_token_but_runs_first_in_a_frame():
    pacer = FramePacer()
    last = _stream(pacer, 0.1)
    pacer.step_done(False, 0.01, tokens=4)  # a decode step of 4 rows: 2.5 ms per token
    assert pacer.estimate_s(4) == 0.01
    assert pacer.estimate_s(40) == pytest.approx(0.1)
    assert pacer.hold_s(last + 0.02, tokens=4) == 0.0
    assert pacer.hold_s(last + 0.02, tokens=40) > 0.0  # ~100 ms from +20 ms would overrun the chunk due at +100
    pacer.step_done(True, 0.02)  # the chunk is served: a new frame
    assert pacer.hold_s(last + 0.12, tokens=400) == 0.0  # the first language step of a frame always runs


def test_fixed_k_takes_k_language_steps_per_frame():
    pacer = FramePacer(steps_per_frame=2)
    last = _stream(pacer, 0.1)
    pacer.step_done(True, 0.02)  # the frame's action step
    for _ in range(2):
        assert pacer.hold_s(last + 0.03) == 0.0
        pacer.step_done(False, 0.001)
    assert pacer.hold_s(last + 0.03) > 0.0  # k steps done: wait for the next chunk
    pacer.step_done(True, 0.02)
    assert pacer.hold_s(last + 0.03) == 0.0


def test_the_earliest_stream_decides_and_stale_streams_are_forgotten():
    pacer = FramePacer()
    _stream(pacer, 0.1, start=0.0)  # last arrival at 0.3, next due 0.4
    _stream(pacer, 0.5, start=0.0, name="nav")  # last at 1.5: due 2.0
    pacer.step_done(False, 0.2)
    assert pacer.hold_s(0.3) > 0.0  # the 10 Hz stream is due at 0.4, a 200 ms step would overrun it
    stale = 0.3 + STALE_PERIODS * 0.1 + 0.01
    assert pacer.hold_s(stale) == 0.0  # the 10 Hz stream stopped; only the 2 Hz one is live (due 2.0)
    assert pacer.hold_s(1.85) > 0.0


def test_a_stream_that_stopped_holds_no_one_and_hides_no_stream_still_asking():
    """A task that asked twice with an hour's deadline and stopped stays live (stale only after STALE_PERIODS of its
    deadline), but past its slot (plus grace) it no longer decides: the 1 Hz arm still asking is held for."""
    pacer = FramePacer()
    for t in (0.0, 0.1):
        pacer.action_arrived("stopped", t, deadline_s=3600.0)
    _stream(pacer, 1.0, start=0.0)  # the arm: last at 3.0, due 4.0
    pacer.step_done(False, 0.2)
    assert pacer.hold_s(3.9) > 0.0  # a 200 ms step would overrun the arm's chunk
    assert pacer.hold_s(3.5) == 0.0  # it fits before


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        FramePacer(steps_per_frame=-1)


def _timing(pi05_tiny) -> tuple[float, int]:
    """The action period: 10 Hz if this CPU serves an action step in a quarter of that, else 4x the slowest one
    measured now; and the tokens that keep the six language requests decoding across at least three chunks' due
    times at this machine's speed now (a step that would run into a due time is what the pacer holds): the test checks
    the pacing, not the machine's speed."""
    driver = FrameDriver(make_engine(pi05_tiny), Mode.CONTINUOUS_BATCHING, steps_per_frame=1)
    driver.run(robot_frames([0, 0, 0], max_new_tokens=1, images=0, seed=99))
    period = max(0.1, 4 * max(r.steps[0].end_s - r.steps[0].start_s for r in driver.records))
    engine, seconds = make_engine(pi05_tiny), []
    engine.generate(language_requests(6, 4))  # first calls' costs aside
    for tokens in (4, 4 + LANGUAGE_TOKENS):  # the difference is LANGUAGE_TOKENS decode steps of six rows
        start = time.perf_counter()
        engine.generate(language_requests(6, tokens))
        seconds.append(time.perf_counter() - start)
    step = max(seconds[1] - seconds[0], 1e-4) / LANGUAGE_TOKENS
    return period, min(MAX_LANGUAGE_TOKENS, max(LANGUAGE_TOKENS, math.ceil(3 * period / step)))


def test_paced_engine_thread_keeps_an_action_stream_on_time_while_language_decodes(pi05_tiny, one_torch_thread):
    period, tokens = _timing(pi05_tiny)
    engine = make_engine(pi05_tiny)
    paced = serve_stream(engine, FramePacer(), period, FRAMES, {1: language_requests(6, tokens)})
    late = [(i, c.error_code, round(c.latency_ms)) for i, c in enumerate(paced.chunks) if not c.ok]
    assert not late, f"period {period * 1e3:.0f} ms: {late}"
    assert all(c.actions.shape == (10, 32) for c in paced.chunks)
    assert all(out.ok and out.generated_tokens == tokens for out in paced.language)
    assert paced.held_s > 0.0  # the pacer did hold language steps for the stream
    engine.check_invariants()
    assert engine.pool.num_used == 0 and not engine.has_unfinished
    unpaced = serve_stream(make_engine(pi05_tiny), None, period, FRAMES, {1: language_requests(6, tokens)})
    assert [o.token_ids for o in paced.language] == [o.token_ids for o in unpaced.language]  # when, not what
    # Pacing moves a chunk into another step's batch, whose matmul shapes round differently: equal up to fp32 rounding.
    for a, b in zip(paced.chunks, unpaced.chunks, strict=True):
        if b.ok:
            torch.testing.assert_close(torch.as_tensor(a.actions), torch.as_tensor(b.actions), rtol=1e-3, atol=1e-4)


def test_a_chunk_request_the_engine_refuses_starts_no_stream(pi05_tiny, one_torch_thread):
    """An action request refused at submit (here: an empty prompt) asks for no chunks: the pacer keeps no stream for
    it that would hold language steps back for its deadline. One taken opens its stream with its deadline as its
    caller set it (the chunk's window), not what is left of it after the request waited for the engine thread."""
    engine = AsyncEngine(make_engine(pi05_tiny), pacer=FramePacer(steps_per_frame=1))
    try:
        frame = robot_frames([0], max_new_tokens=1, images=0, seed=3)[0]
        refused = engine.submit(replace(frame.actions[0], prompt="", deadline_s=3600.0)).result(TIMEOUT)
        assert refused.error_code == ErrorCode.INVALID_ARGUMENT, refused.message
        assert engine.call(lambda _: dict(engine.pacer._streams)).result(TIMEOUT) == {}
        taken = replace(frame.actions[0], deadline_s=30.0)
        held = engine.call(lambda _: time.sleep(0.3))  # the engine thread busy: the request waits in its inbox
        assert engine.submit(taken).result(TIMEOUT).ok and held.done()
        streams = engine.call(lambda _: dict(engine.pacer._streams)).result(TIMEOUT)
        assert list(streams) == [taken.task_id] and streams[taken.task_id].deadline_s == 30.0
    finally:
        engine.shutdown(TIMEOUT)


def test_a_stream_that_stops_does_not_stall_language(pi05_tiny, one_torch_thread):
    period = 0.05
    engine = AsyncEngine(make_engine(pi05_tiny), pacer=FramePacer(steps_per_frame=1))
    try:
        for i, frame in enumerate(robot_frames([0, 0, 0], max_new_tokens=1, images=0, seed=3)):
            assert engine.submit(frame.actions[0]).result(TIMEOUT).ok
            if i < 2:
                time.sleep(period)
        outs = [f.result(TIMEOUT) for f in [engine.submit(g) for g in language_requests(2, 12)]]
        assert all(o.ok and o.generated_tokens == 12 for o in outs)
        # k = 1 holds language after each of its steps only while the stream is live; it stopped, so the 12 steps
        # are held at most until the stream counts as stale, not a frame each
        assert engine.stats().paced_hold_s < (STALE_PERIODS + 1) * period
    finally:
        engine.shutdown(TIMEOUT)


def test_a_decode_step_is_not_judged_by_last_frames_prefill():
    pacer = FramePacer()
    pacer.step_done(False, 1.2, tokens=1200)  # four questions' prompts in one step: 1 ms per token
    pacer.step_done(False, 0.06, tokens=4)  # then their four decode rows
    assert pacer.estimate_s(4) == 0.06
    assert pacer.estimate_s(400) == 1.2  # no step near its size: the smallest larger one bounds it
    assert pacer.estimate_s(2400) == pytest.approx(2.4)  # larger than any: the largest one's cost per token


def test_a_frames_prefill_is_judged_by_earlier_prefills_not_by_the_decode_steps_since():
    """The moving-camera workload: one 258-token prefill per frame, then dozens of 5-row decode steps at ~2 ms per
    token (their fixed overhead). Extrapolating those to the next frame's 256 tokens gave 0.5 s instead of 0.2 and
    held the prefill past the chunk, which then paid for the frame itself."""
    pacer = FramePacer()
    last = _stream(pacer, 1.0)
    pacer.step_done(False, 0.193, tokens=258)
    for _ in range(50):
        pacer.step_done(False, 0.0105, tokens=5)
    assert pacer.estimate_s(5) == 0.0105
    assert pacer.estimate_s(256) == 0.193
    assert pacer.estimate_s(273) == pytest.approx(273 * 0.193 / 258)
    assert pacer.hold_s(last + 0.53, tokens=273) == 0.0  # ends ~0.2 s later, well before the chunk due at +1 s
    assert pacer.hold_s(last + 0.85, tokens=273) > 0.0


def test_a_slow_step_is_forgotten_after_step_memory_language_steps():
    """A cold first prefill (3 s for 2000 tokens) must not judge every later prefill: its size class may never see
    another step (the prefill cap keeps later prompts smaller)."""
    pacer = FramePacer()
    pacer.step_done(False, 3.0, tokens=2000)
    pacer.step_done(False, 0.02, tokens=200)
    assert pacer.estimate_s(300) == 3.0  # the only step as large
    for _ in range(STEP_MEMORY - 1):
        pacer.step_done(False, 0.01, tokens=5)
    assert pacer.estimate_s(300) == pytest.approx(300 * 0.02 / 200)  # the cold step is forgotten, the 200-token kept
    pacer.step_done(False, 0.01, tokens=5)
    assert pacer.estimate_s(300) == pytest.approx(300 * 0.01 / 5)  # and then that one too


def test_a_chunk_waits_a_few_milliseconds_for_the_chunks_due_with_it_then_they_share_a_step():
    pacer = FramePacer()
    for name, offset in (("arm0", 0.0), ("arm1", 0.002), ("arm2", 0.004)):  # three arms on one control clock
        _stream(pacer, 1.0, count=3, start=100.0 + offset, name=name)
    _stream(pacer, 2.0, count=3, start=99.5, name="slow")  # its next chunk is due at 104.5: not waited for
    pacer.step_done(True, 0.18)  # their chunks so far were served
    assert pacer.coalesce_s(103.0) == 0.0  # nothing owed yet
    pacer.action_arrived("arm0", 103.0)
    assert pacer.coalesce_s(103.0005) == pytest.approx(COALESCE_S - 0.0005)  # arm1 and arm2 are due by 103.01
    pacer.action_arrived("arm1", 103.002)
    assert pacer.coalesce_s(103.0025) == pytest.approx(COALESCE_S - 0.0025)  # arm2 still due
    pacer.action_arrived("arm2", 103.004)
    assert pacer.coalesce_s(103.0045) == 0.0  # every stream due is here: step now
    pacer.step_done(True, 0.18)
    pacer.action_arrived("arm0", 104.0)
    assert pacer.coalesce_s(104.0 + COALESCE_S) == 0.0  # a stream that does not come is waited for no longer


def test_the_prefill_cap_leaves_a_chunk_asked_mid_step_its_window():
    pacer = FramePacer()
    assert pacer.prefill_cap(0.0) is None  # no action stream: no cap
    pacer.action_arrived("arm", 100.0, deadline_s=2.5)  # one arrival: its deadline is its window
    assert pacer.prefill_cap(100.1) is None  # no language step timed yet
    pacer.step_done(False, 1.2, tokens=1200)
    assert pacer.prefill_cap(100.1) == pytest.approx(1250, abs=1)  # half the 2.5 s window at 1 ms per token
    pacer.step_done(True, 1.0)  # the chunk's own step takes 1 s of it
    assert pacer.prefill_cap(100.1) == pytest.approx(750, abs=1)
    assert pacer.prefill_cap(100.0 + STALE_PERIODS * 2.5 + 0.1) is None  # the stream went quiet: forgotten
    pacer.action_arrived("arm", 200.0, deadline_s=0.5)
    assert pacer.prefill_cap(200.1) is None  # an action step outlasts the window: capping language would not help
