"""The quant suite's measurements on small models: agreement counting, chunked text scores that really read the
quantized pool, the sensitivity sweep and fallback, and pi05 action chunks."""

import math

import numpy as np
import pytest
import torch
from engine_helpers import make_engine

from oxygen_ros.bench.quant_actions import action_chunks, observation_change_mse, observations
from oxygen_ros.bench.quant_distortion import (
    PER_CHANNEL,
    PER_TOKEN,
    distortion,
    int8_as_stored,
    relative_error,
    text_kv,
    uniform_code,
)
from oxygen_ros.bench.quant_fallback import Gates, fallback, layer_sensitivity
from oxygen_ros.bench.quant_language import Agreement, LanguageBench, LanguageQuality, agreement
from oxygen_ros.bench.quant_suite import gates
from oxygen_ros.bench.quant_policy import PolicyBench
from oxygen_ros.bench.quant_text import TextReference, text_in_pool, text_token_ids
from oxygen_ros.kernels.quant import dequantize, select_scale


def test_agreement_counts_positions_up_to_each_prompts_first_divergence():
    reference = [[1, 2, 3, 4], [5, 6, 7, 8], [1, 1, 1, 1]]
    result = agreement(reference, [[1, 2, 3, 4], [5, 9, 7, 8], [2, 1, 1, 1]])
    assert result.first_divergence == [None, 1, 0]
    assert result.token_agreement == pytest.approx(5 / 12)  # 4 + 1 + 0: equal tails after a divergence do not count
    assert result.prompts_identical == pytest.approx(1 / 3)


def test_chunked_scores_read_earlier_chunks_from_the_quantized_pool(tiny_bundle):
    full = make_engine(tiny_bundle)
    ids = text_token_ids(full, 96)
    one_pass, chunked = TextReference.of(full, ids, chunk=len(ids)), TextReference.of(full, ids, chunk=16)
    torch.testing.assert_close(chunked.logprobs, one_pass.logprobs, rtol=0, atol=1e-4)  # chunking itself is exact
    quantized = make_engine(tiny_bundle, kv_dtype="int8")
    in_flight = one_pass.score(quantized)  # attends to in-flight K/V only
    assert (in_flight.ppl_increase, in_flight.kl, in_flight.top1) == pytest.approx((0.0, 0.0, 1.0), abs=1e-12)
    score = chunked.score(quantized)
    assert score.kl > 1e-9 and score.ppl_increase != 0.0
    fp8 = chunked.score(make_engine(tiny_bundle, kv_dtype="fp8"))
    # top-1 counts the positions whose argmax survives: fp8's larger error flips at least as many as int8's
    assert 0.0 < fp8.top1 <= score.top1 <= 1.0 and fp8.kl > score.kl
    assert quantized.pool.num_free == quantized.pool.num_blocks  # the scoring gave its blocks back


def test_sweep_and_fallback_keep_the_most_sensitive_layers(tiny_bundle):
    bench = LanguageBench(tiny_bundle, ["Name a color.", "Count to three."], new_tokens=4, text_tokens=64, chunk=16)
    sensitivity = layer_sensitivity(bench, "fp8", sweep_tokens=48)
    assert len(sensitivity) == 2 and all(0 < s < math.inf for s in sensitivity)
    worst = int(np.argmax(sensitivity))
    best, tried = fallback(bench, "fp8", Gates(), sensitivity, 2)
    assert [q.full_precision_layers for q in tried] == [(0, 1), (worst,)]  # the widest first, then from one layer
    assert best is tried[-1] and best.agreement is not None
    best, tried = fallback(bench, "fp8", Gates(token_agreement=1.0, kl=-1.0), sensitivity, 2)
    assert tried == [best] and best.full_precision_layers == (0, 1)  # even the widest misses: nothing narrower
    assert best.agreement is None  # the teacher-forced gates already missed: no greedy run
    assert (best.ppl_increase, best.kl) == pytest.approx((0.0, 0.0), abs=1e-6)  # every layer at full precision
    assert best.teacher_forced_top1 == 1.0


def test_int8_is_gated_by_bf16_of_the_same_run_and_fp8_by_a_fixed_top1():
    def quality(name: str, agreement_: float, top1: float, kl: float) -> LanguageQuality:
        return LanguageQuality(name, (), name, 0.0, kl, top1, Agreement(agreement_, 0.0, []))

    bf16 = quality("bf16", 0.83, 0.99, 3e-5)
    assert gates("int8", {}) is None  # nothing to compare with: the gate is not judged
    gate = gates("int8", {"bf16": bf16})
    assert gate == Gates(0.83, 0.99, 3e-5)
    assert gate.met(quality("int8", 0.84, 0.995, 2e-5)) and gate.met(quality("int8", 0.83, 0.99, 3e-5))
    for worse in (quality("int8", 0.82, 0.995, 2e-5), quality("int8", 0.9, 0.98, 2e-5), quality("int8", 0.9, 1.0, 4e-5)):
        assert not gate.met(worse)
    assert gates("fp8", {}) == Gates(teacher_forced_top1=0.8)


def test_action_chunks_are_reproducible_and_follow_the_observation(pi05_tiny):
    obs = observations(2, images_per_observation=1)
    first = action_chunks(make_engine(pi05_tiny), obs, "a")
    again = action_chunks(make_engine(pi05_tiny), obs, "b")
    assert first.shape == (2, 10, 32)
    np.testing.assert_array_equal(first, again)
    assert observation_change_mse(first) > 0.0


def test_policy_bench_keeps_the_observation_prefix_in_its_own_format(tiny_bundle):
    bench = PolicyBench(tiny_bundle, count=3, new_tokens=4)
    same = bench.measure("auto")
    assert (same.token_agreement, same.prompts_identical) == (1.0, 1.0)  # the reference engine agrees with itself
    everywhere, kept = bench.measure("int8"), bench.measure("int8", "fp32")
    assert (everywhere.layout, kept.layout) == ("int8", "int8+fp32")
    fp32 = same.bytes_per_token  # tiny_bundle computes in fp32
    # an fp32 block's four int8 units each carry key (per channel) and value (per token) scales it does not use
    idle_scales = 1 + 1 / bench.block_size + 2 / tiny_bundle.head_dim
    assert everywhere.bytes_per_token < kept.bytes_per_token < fp32 * idle_scales
    assert all(0.0 <= q.token_agreement <= 1.0 and q.time_ratio > 0 for q in (everywhere, kept))


def test_distortion_replays_the_int8_pool_and_ranks_bf16_against_uniform_codes(tiny_bundle):
    full = make_engine(tiny_bundle)
    ids = text_token_ids(full, 97)  # 96 stored tokens: six whole blocks of 16
    k, v = text_kv(full, ids, chunk=len(ids))  # one pass: every layer's K/V is computed, never read back
    assert k.shape == (tiny_bundle.num_layers * 6, 16, tiny_bundle.num_kv_heads, tiny_bundle.head_dim)
    assert full.pool.num_free == full.pool.num_blocks
    # the same pass through an int8 pool stores exactly what int8_as_stored makes of the fp32 K/V
    int8 = make_engine(tiny_bundle, kv_dtype="int8")
    with text_in_pool(int8, ids, chunk=len(ids)) as (blocks, _):
        index = torch.tensor(blocks[:6])
        stored = [torch.cat([dequantize(plane[index], select_scale(scale, index))
                             for layer in int8.kv.layers for plane, scale in [layer.blocks.planes[i]]])
                  for i in (0, 1)]  # fmt: skip
    torch.testing.assert_close(stored[0], int8_as_stored(k, per_channel=True), rtol=0, atol=0)
    torch.testing.assert_close(stored[1], int8_as_stored(v, per_channel=False), rtol=0, atol=0)
    metrics = distortion(k, v)
    for plane, x in (("k", k), ("v", v)):
        bf16 = metrics[f"{plane}_bf16_rel_error"]
        assert 0 < metrics[f"{plane}_fp16_rel_error"] < bf16 < metrics[f"{plane}_int8_rel_error"]
        bits = metrics[f"{plane}_bits_to_match_bf16"]
        assert bits is not None and 8 < bits <= 16
        grouping = PER_CHANNEL if plane == "k" else PER_TOKEN
        assert relative_error(x, uniform_code(x, bits, grouping)) <= bf16 < relative_error(
            x, uniform_code(x, bits - 1, grouping))  # the fewest bits, not merely enough
