"""A step that prefills and decodes at once attends its one-token rows as a decode step over the pool and pads only
the prompts (``StepContext.decode_rows``): the output equals the padded attention over every row that it replaces,
for a bidirectional prompt (pi0.5's prefix) and a causal one over a cached prefix, on every CPU read path (causal
rows the C kernel reads in place keep that path, kv.token_rows)."""

import pytest
import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.kv.attention_backend import choose_backend
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.layers.attention import paged_attention

CPU = torch.device("cpu")
HEADS, KV_HEADS, DIM, BLOCK = 4, 2, 16, 16
# (block table, tokens already in the pool, new tokens, bidirectional length) per sequence
PROMPT_BIDIRECTIONAL = ([0, 1, 2], 0, 40, 40)
PROMPT_CACHED = ([3, 4, 5], 20, 18, 0)
DECODES = [([6, 7], 25, 1, 0), ([8, 9, 10], 33, 1, 0), ([0, 1, 11], 47, 1, 0)]  # the last shares two blocks


def _cache(config: EngineConfig) -> KVCache:
    layout = KVLayout(1, KV_HEADS, DIM, BLOCK, torch.float32)
    kv = KVCache(layout, 16, CPU, choose_backend(config, CPU))
    gen = torch.Generator().manual_seed(5)
    everything = torch.arange(16 * BLOCK)
    k, v = (torch.randn(len(everything), KV_HEADS, DIM, generator=gen) for _ in "kv")
    kv.layers[0].write(k, v, kv.steps.batch([list(range(16))], [0], [16 * BLOCK], [0])[0].kv_writes)
    return kv


@pytest.mark.parametrize("prompts", [[PROMPT_BIDIRECTIONAL], [PROMPT_CACHED], [PROMPT_BIDIRECTIONAL, PROMPT_CACHED]])
@pytest.mark.parametrize("config", [EngineConfig(), EngineConfig(cpu_paged_decode=False), EngineConfig(cpu_kernels=False)],
                         ids=["c-kernels", "torch-cascade", "no-c"])  # fmt: skip
def test_decode_rows_beside_a_prompt_equal_the_padded_step(prompts, config):
    kv = _cache(config)
    rows = [*prompts, *DECODES]
    tables, starts, counts, bidirectional = (list(x) for x in zip(*rows, strict=True))
    ctx, _ = kv.steps.batch(tables, starts, counts, bidirectional)
    assert ctx.decode_rows is not None
    # causal rows over a pool the C kernel reads in place go that way (kv.token_rows), the rest split
    assert (ctx.token_rows is not None) == (kv.prefills_in_place and not any(bidirectional))
    assert ctx.token_rows is not None or ctx.decode_rows.context.planned  # planned with the step
    gen = torch.Generator().manual_seed(9)
    total = sum(counts)
    q = torch.randn(total, HEADS, DIM, generator=gen)
    k, v = (torch.randn(total, KV_HEADS, DIM, generator=gen) for _ in "kv")
    split = paged_attention(q, k, v, ctx, kv.layers[0], DIM**-0.5)
    ctx.merge_decode_rows()  # the reference: every row padded to the longest prompt, as before the split
    ctx.token_rows = None  # (the C kernel's rows too: compared against the padded attention, not themselves)
    padded = paged_attention(q, k, v, ctx, kv.layers[0], DIM**-0.5)
    torch.testing.assert_close(split, padded, rtol=1e-5, atol=1e-5)


def test_a_decode_only_or_prompt_only_step_is_not_split():
    kv = _cache(EngineConfig())
    decode, _ = kv.steps.batch([t for t, *_ in DECODES], [s for _, s, _, _ in DECODES], [1, 1, 1], [0, 0, 0])
    prompts, _ = kv.steps.batch([PROMPT_BIDIRECTIONAL[0]], [0], [40], [40])
    assert decode.decode_rows is None and decode.prefill is None
    assert prompts.decode_rows is None and prompts.prefill is not None
