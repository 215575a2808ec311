"""Shared-prefix (cascade) decode attention, the CPU decode path: equal to the paged decode kernel (Triton,
interpreted here) and its torch reference over the same tables, and to fp64 attention over the stored K/V, for every
storage format, GQA, ragged lengths, block boundaries, shared and unshared rows; block mass lands on the same table
entries.  Tolerances as in test_paged_decode.py (the same K/V, only the order of additions differs)."""

import pytest
import torch

from paged_contexts import NUM_BLOCKS, ROWS, naive, pool

from oxygen_ros.kernels import KVBlocks, KVQuantSpec, cascade_decode_attention, paged_decode_attention, write_kv
from oxygen_ros.kernels.cascade_decode import attention_with_lse_products
from oxygen_ros.kv.cascade import plan_cascade

OUTPUT_ATOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
CASES = [("fp32", 2, 1, 16, 64), ("fp16", 3, 3, 16, 64), ("bf16", 1, 8, 16, 64), ("int8", 3, 3, 16, 40),
         ("fp8", 2, 4, 16, 64)]  # fmt: skip
Q_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.mark.parametrize("name,kv_heads,group,block_size,head_dim", CASES)
def test_cascade_equals_paged_decode_and_naive(name, kv_heads, group, block_size, head_dim, device):
    blocks = pool(name, kv_heads, block_size, head_dim, device)
    tables = [r[0] for r in ROWS]
    lens = [r[1] for r in ROWS]
    width = max(map(len, tables))
    padded = [t + [0] * (width - len(t)) for t in tables]
    table_tensor = torch.tensor(padded, device=device)
    q_dtype = Q_DTYPE.get(name, torch.float32)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(len(ROWS), kv_heads * group, head_dim, generator=gen).to(device, q_dtype)
    scale = head_dim**-0.5

    plan = plan_cascade(padded, lens, block_size, device, min_saved_reads=0)  # groups of a few blocks, too
    mass = torch.zeros(table_tensor.shape, device=device)
    out = cascade_decode_attention(q, blocks, plan, scale, block_mass=mass)
    assert out.dtype == q_dtype and out.shape == q.shape
    atol = OUTPUT_ATOL[q_dtype]
    for backend in ("triton", "torch"):
        paged_mass = torch.zeros(table_tensor.shape, device=device)
        paged = paged_decode_attention(q, blocks, table_tensor, torch.tensor(lens, device=device), scale,
                                       block_mass=paged_mass, backend=backend)  # fmt: skip
        torch.testing.assert_close(out, paged, atol=atol, rtol=0)
        torch.testing.assert_close(mass, paged_mass, atol=1e-5, rtol=0)
    naive_out, naive_mass = naive(q, blocks, table_tensor, lens, scale)
    torch.testing.assert_close(out.double().cpu(), naive_out, atol=atol, rtol=0)
    torch.testing.assert_close(mass.double().cpu(), naive_mass, atol=1e-5, rtol=0)


def test_plan_reads_shared_blocks_once_and_runs_in_place(device):
    """Rows 0-2 share blocks 4-6 as one view, 3-4 share [30, 12] by index, each then reads its own suffix; rows
    that share nothing are alone, read in place when their blocks are a run (5, 8), by index when not (6, 7, 9:
    7 shares block 4 but not the blocks 0-2 share, so it is alone too)."""
    tables = [r[0] for r in ROWS]
    lens = [r[1] for r in ROWS]
    width = max(map(len, tables))
    plan = plan_cascade([t + [0] * (width - len(t)) for t in tables], lens, 16, device, min_saved_reads=0)

    def ids(blocks):
        return blocks if isinstance(blocks, slice) else blocks.tolist()

    assert plan.grouped_rows.tolist() == [0, 1, 2, 3, 4]
    assert {tuple(p.rows.tolist()): (ids(p.blocks), p.num_blocks) for p in plan.shared} == {
        (0, 1, 2): (slice(4, 7), 3),
        (3, 4): ([30, 12], 2),
    }
    assert {lone.row: (ids(lone.blocks), lone.num_blocks, lone.length) for lone in plan.lone} == {
        5: (slice(8, 11), 3, 33),
        6: ([44, 2, 35], 3, 40),
        7: ([4, 26], 2, 17),
        8: (slice(14, 16), 2, 32),
        9: ([9, 7, 11, 13], 4, 49),
    }
    shared_blocks = [3, 3, 3, 2, 2]
    suffix_lens = (plan.suffix_bias[:, 0, 0] == 0).sum(dim=1).tolist()
    assert suffix_lens == [n - 16 * s for n, s in zip(lens, shared_blocks)]
    for row, (table, s, n) in enumerate(zip(tables, shared_blocks, suffix_lens)):
        count = -(-n // 16)
        assert plan.suffix_tables[row, :count].tolist() == table[s : s + count]
        assert plan.suffix_columns[row, :count].tolist() == list(range(s, s + count))


def test_one_row_and_rows_sharing_everything(device):
    """Batch 1 (one lone row, read in place) and a batch whose rows are one table (one group of every row, no
    index)."""
    blocks = pool("fp32", 3, 16, 64, device)
    q = torch.randn(3, 9, 64).to(device)
    for tables, lens in (([[0, 1, 2, 3]], [57]), ([[5, 6, 7]] * 3, [40, 40, 40])):
        plan = plan_cascade(tables, lens, 16, device, min_saved_reads=0)
        n = len(tables)
        if n == 1:
            assert not plan.shared and [lone.blocks for lone in plan.lone] == [slice(0, 4)]
        else:
            assert not plan.lone and plan.grouped_rows is None and [p.rows for p in plan.shared] == [None]
        out = cascade_decode_attention(q[:n], blocks, plan, 0.125)
        ref = paged_decode_attention(q[:n], blocks, torch.tensor(tables, device=device),
                                     torch.tensor(lens, device=device), 0.125, backend="torch")  # fmt: skip
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=0)


def test_attention_does_not_depend_on_where_blocks_sit(device):
    """The same contexts stored in consecutive blocks and in scattered ones (as after a restore from a memory tier)
    give bit-identical attention: the split into shared and own parts follows from the sharing alone.  Rows 0-2
    share three blocks, row 3 is alone."""
    blocks = KVBlocks.allocate(KVQuantSpec.parse("fp32"), NUM_BLOCKS, 16, 3, 64, device)
    gen = torch.Generator().manual_seed(5)
    lens = [70, 51, 52, 40]
    shared = torch.randn(48, 3, 64, generator=gen), torch.randn(48, 3, 64, generator=gen)
    own = [(torch.randn(n - 48, 3, 64, generator=gen), torch.randn(n - 48, 3, 64, generator=gen)) for n in lens[:3]]
    own.append((torch.randn(lens[3], 3, 64, generator=gen), torch.randn(lens[3], 3, 64, generator=gen)))
    q = torch.randn(len(lens), 9, 64, generator=gen).to(device)
    outs = []
    for layout in ([[0, 1, 2, 3, 4], [0, 1, 2, 5, 6], [0, 1, 2, 7], [8, 9, 10]],
                   [[40, 9, 33, 3, 17], [40, 9, 33, 21, 5], [40, 9, 33, 12], [30, 2, 44]]):  # fmt: skip
        for row, table in enumerate(layout):
            head = [] if row == 3 else [shared]
            k = torch.cat([*(h[0] for h in head), own[row][0]]).to(device)
            v = torch.cat([*(h[1] for h in head), own[row][1]]).to(device)
            slots = torch.tensor([table[i // 16] * 16 + i % 16 for i in range(lens[row])], device=device)
            write_kv(blocks, slots, k, v)
        width = max(map(len, layout))
        plan = plan_cascade([t + [t[-1]] * (width - len(t)) for t in layout], lens, 16, device, min_saved_reads=0)
        assert len(plan.shared) == 1 and [lone.row for lone in plan.lone] == [3]
        outs.append(cascade_decode_attention(q, blocks, plan, 0.125))
    assert torch.equal(outs[0], outs[1])


def test_rows_sharing_a_few_more_blocks_stay_in_their_group(device):
    """Eight rows share a 40-block observation; three of them share one more block (their questions start alike).
    A group of their own would re-read 41 blocks to save 2 reads, so all eight stay one group and the three read the
    extra block as their own; rows sharing only a short prompt are not grouped at all."""
    obs = list(range(40))
    tables = [obs + [40, 41 + i] for i in range(3)] + [obs + [50 + i, 60 + i] for i in range(5)]
    tables += [[70, 71, 80 + i] for i in range(2)]  # two rows sharing two blocks: 2 reads saved
    lens = [16 * 41 + 5] * 8 + [40, 40]
    plan = plan_cascade(tables, lens, 16, device)
    assert plan.grouped_rows.tolist() == list(range(8))
    assert [(p.rows, p.num_blocks) for p in plan.shared] == [(None, 40)]  # rows None: every grouped row
    assert [lone.row for lone in plan.lone] == [8, 9]
    blocks = KVBlocks.allocate(KVQuantSpec.parse("fp32"), 96, 16, 3, 64, device)
    gen = torch.Generator().manual_seed(2)
    write_kv(blocks, torch.arange(96 * 16, device=device), *(torch.randn(96 * 16, 3, 64, generator=gen).to(device)
                                                             for _ in "kv"))  # fmt: skip
    q = torch.randn(len(tables), 9, 64, generator=gen).to(device)
    table_tensor = torch.tensor([t + [0] * (42 - len(t)) for t in tables], device=device)
    mass, paged_mass = torch.zeros(table_tensor.shape, device=device), torch.zeros(table_tensor.shape, device=device)
    out = cascade_decode_attention(q, blocks, plan, 0.125, block_mass=mass)
    ref = paged_decode_attention(q, blocks, table_tensor, torch.tensor(lens, device=device), 0.125,
                                 block_mass=paged_mass, backend="torch")  # fmt: skip
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=0)
    torch.testing.assert_close(mass, paged_mass, atol=1e-5, rtol=0)


def test_the_products_off_cpu_equal_the_fused_cpu_attention_and_its_log_sum_exp():
    """CUDA has no kernel of the fused CPU attention that returns the log-sum-exp; its stand-in there (plain fp32
    products) against that attention on CPU, with rows whose bias masks a tail of their keys."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, 2, 4, 32, generator=gen) for _ in "qkv")
    k, v = torch.cat([k] * 5, dim=2), torch.cat([v] * 5, dim=2)  # 20 keys
    bias = torch.zeros(3, 1, 1, 20)
    bias[0, ..., 7:], bias[1, ..., 19:] = float("-inf"), float("-inf")
    for mask in (bias, None):
        fused = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=0.2)
        out, lse = attention_with_lse_products(q, k, v, mask, 0.2)
        torch.testing.assert_close(out, fused[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(lse, fused[1], atol=1e-5, rtol=0)
