"""Prefill steps as rows of the CPU's paged attention kernel (``kv.token_rows``): the plan gives each new token its
context length and groups the rows that share cached blocks, and a random Llama's mixed step (question tails after
a shared cached prefix, a sequence continuing its own cache, fresh prompts, decoding rows) through that path equals
the padded, masked torch attention it replaces. (The real SmolLM2 against transformers, batched and from the
prefix cache, runs through it too: test_smollm2_vs_hf.py.)"""

import pytest
import torch

from oxygen_ros.kernels import write_kv
from oxygen_ros.kernels.cpu_library import library
from oxygen_ros.kv import step_builder
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.kv.token_rows import plan_token_rows
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.llama import LlamaModel

BLOCK = 16
# (table, cached tokens, new tokens): two tails on one cached observation (blocks 3, 8), a continuation of its own
# 20 cached tokens, a fresh prompt, and two decoding rows (one on the observation)
SEQUENCES = [([3, 8, 11], 32, 5), ([3, 8, 12], 32, 9), ([1, 4], 20, 6), ([7, 9], 0, 18), ([3, 8, 13, 2], 50, 1),
             ([10], 7, 1)]  # fmt: skip


def _context() -> StepContext:
    width = max(len(t) for t, _, _ in SEQUENCES)
    tables = [t + [0] * (width - len(t)) for t, _, _ in SEQUENCES]
    slots = [t[p // BLOCK] * BLOCK + p % BLOCK for t, cached, new in SEQUENCES for p in range(cached, cached + new)]
    return StepContext(slot_mapping=torch.tensor(slots), query_lens=[n for _, _, n in SEQUENCES],
                       context_lens=[c + n for _, c, n in SEQUENCES], block_tables=torch.tensor(tables),
                       tables=tables, slots=slots)  # fmt: skip


def test_plan_gives_each_token_its_context_and_groups_the_shared_cached_blocks():
    ctx = _context()
    rows = plan_token_rows(ctx.block_tables, ctx.query_lens, ctx.context_lens, ctx.tables, BLOCK)
    expected = [length for _, cached, new in SEQUENCES for length in range(cached + 1, cached + new + 1)]
    assert rows.lengths.tolist() == expected and rows.max_length == 51
    assert rows.tables.shape == (len(expected), 4) and rows.tables[5].tolist() == [3, 8, 12, 0]
    groups = rows.groups
    members = [groups.rows[a:b].tolist() for a, b in zip(groups.starts[:-1].tolist(), groups.starts[1:].tolist())]
    tails_and_decode = list(range(0, 14)) + [38]  # both tails and the decoding row on the observation: 2 blocks
    assert sorted(zip(members, groups.blocks.tolist())) == sorted([(tails_and_decode, 2), (list(range(14, 20)), 1)])


OBSERVATION = 32  # tokens of the observation sequences 0, 1 and 4 share (whole blocks at every block size below)
ON_OBSERVATION = (0, 1, 4)


def _scattered_context(block_size: int) -> tuple[StepContext, int]:
    """``SEQUENCES``' step at ``block_size``: the observation's blocks shared, every other block a sequence's own,
    ids shuffled so that no table is a run (and the number of blocks the pool needs)."""
    gen = torch.Generator().manual_seed(block_size)
    shared = OBSERVATION // block_size
    own = [-(-(cached + new - (OBSERVATION if b in ON_OBSERVATION else 0)) // block_size)
           for b, (_, cached, new) in enumerate(SEQUENCES)]  # fmt: skip
    ids = (torch.randperm(shared + sum(own), generator=gen) + 1).tolist()  # block 0 stays the tables' padding
    tables, start = [], shared
    for b, count in enumerate(own):
        tables.append((ids[:shared] if b in ON_OBSERVATION else []) + ids[start : start + count])
        start += count
    width = max(len(t) for t in tables)
    padded = [t + [0] * (width - len(t)) for t in tables]
    slots = [t[p // block_size] * block_size + p % block_size for t, (_, cached, new) in zip(tables, SEQUENCES)
             for p in range(cached, cached + new)]  # fmt: skip
    ctx = StepContext(slot_mapping=torch.tensor(slots), query_lens=[n for _, _, n in SEQUENCES],
                      context_lens=[c + n for _, c, n in SEQUENCES], block_tables=torch.tensor(padded),
                      tables=padded, slots=slots)  # fmt: skip
    return ctx, shared + sum(own) + 1


@pytest.mark.skipif(library() is None, reason="the CPU decode kernels do not run here (no AVX-512 / AVX2 / NEON, or no cc)")
@pytest.mark.parametrize("heads,kv_heads,head_dim,block_size", [(4, 2, 16, 16), (3, 1, 32, 16), (4, 2, 16, 8),
                                                                 (3, 1, 32, 32)])  # fmt: skip
def test_mixed_step_through_token_rows_equals_masked_attention(heads, kv_heads, head_dim, block_size, monkeypatch):
    """Block sizes 8 (the shared K read token by token), 16 and 32 (gathered 16 tokens at a time)."""
    torch.manual_seed(heads + head_dim)
    args = LlamaArgs(vocab_size=101, hidden_size=heads * head_dim, intermediate_size=96, num_layers=2,
                     num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim)  # fmt: skip
    model = LlamaModel(args).eval()
    model.pack_weights()
    _, num_blocks = _scattered_context(block_size)
    kv = KVCache(KVLayout(2, kv_heads, head_dim, block_size, torch.float32), num_blocks, torch.device("cpu"))
    tokens = num_blocks * block_size
    for layer in kv.layers:  # the cached tokens: whatever the pool holds, both paths read the same
        write_kv(layer.blocks, torch.arange(tokens), torch.randn(tokens, kv_heads, head_dim),
                 torch.randn(tokens, kv_heads, head_dim))  # fmt: skip
    saved = [(layer.blocks.k.clone(), layer.blocks.v.clone()) for layer in kv.layers]
    ids = torch.randint(0, 101, (sum(n for _, _, n in SEQUENCES),))
    positions = torch.tensor([p for _, cached, new in SEQUENCES for p in range(cached, cached + new)])
    outputs = []
    for through_rows in (True, False):
        for layer, (k, v) in zip(kv.layers, saved):
            layer.blocks.k.copy_(k), layer.blocks.v.copy_(v)
        if not through_rows:
            monkeypatch.setattr(step_builder, "_rows_read_the_pool", lambda ctx: False)
        ctx = kv.steps.plan(_scattered_context(block_size)[0])
        with torch.inference_mode():
            outputs.append(model(ids, positions, ctx, kv))
        assert (ctx.token_rows is not None) == through_rows
        if through_rows:
            assert ctx.token_rows.groups.blocks.tolist()[0] == OBSERVATION // block_size  # the observation shared
    torch.testing.assert_close(outputs[0], outputs[1], atol=2e-5, rtol=1e-5)


def test_long_chunks_keep_torchs_attention():
    """A chunk longer than the rows path serves (a long prompt batched with others) stays with the masked attention:
    the kernel would keep a weight per row and context token."""
    ctx = _context()
    assert step_builder._rows_read_the_pool(ctx)
    long = StepContext(slot_mapping=torch.arange(200), query_lens=[100, 100], context_lens=[100, 100],
                       block_tables=torch.tensor([[0, 1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12, 13]]))  # fmt: skip
    assert long.prefill.mask is not None and not step_builder._rows_read_the_pool(long)
