"""The C decode attention over an fp32 or int8 pool (``cpu/paged_decode.c``, the CPU's decode path) against
the paged decode kernel (Triton, interpreted here), its torch reference, the shared-prefix torch path it replaces
and fp64 attention, on the rows of paged_contexts.py: blocks shared by several rows as a run or scattered, rows
alone, ragged lengths, a context ending on a block boundary; MHA and GQA; with the shared prefixes attended as
matrix products (prefix groups, several of them, of 2-3 rows; an int8 pool's rows read it whole) and without; block
mass on the same entries."""

import os

import pytest
import torch
from paged_contexts import ROWS, naive, pool

from oxygen_ros.kernels import cascade_decode_attention, paged_decode_attention
from oxygen_ros.kernels.cpu_paged_decode import can_read, cpu_paged_decode
from oxygen_ros.kv.cascade import plan_cascade, plan_prefix_groups

CPU = torch.device("cpu")
# Triton runs on CPU tensors only interpreted (no CUDA here); with CUDA test_paged_decode checks it against torch there
TRITON_ON_CPU = ("triton",) if os.environ.get("TRITON_INTERPRET") == "1" else ()
pytestmark = pytest.mark.skipif(not can_read(pool("fp32", 1, 16, 64, CPU)),
                                reason="the CPU decode kernels do not run here (no AVX-512, AVX2 or NEON, or no C compiler)")


@pytest.mark.parametrize("fmt", ["fp32", "int8"])
@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("kv_heads,group,head_dim", [(2, 1, 64), (3, 3, 64), (1, 8, 32), (2, 4, 128), (1, 5, 48)])
def test_equals_paged_decode_cascade_and_naive(kv_heads, group, head_dim, grouped, fmt):
    blocks = pool(fmt, kv_heads, 16, head_dim, CPU)
    assert can_read(blocks)
    tables, lens = [r[0] for r in ROWS], [r[1] for r in ROWS]
    width = max(map(len, tables))
    padded = [t + [0] * (width - len(t)) for t in tables]
    table_tensor, lens_tensor = torch.tensor(padded), torch.tensor(lens)
    q = torch.randn(len(ROWS), kv_heads * group, head_dim, generator=torch.Generator().manual_seed(5))
    scale = head_dim**-0.5
    mass = torch.zeros(table_tensor.shape)
    groups = plan_prefix_groups(padded, lens, 16, CPU, min_saved_reads=0, min_rows=2) if grouped else None
    if grouped:
        assert groups.blocks.tolist() == [3, 2]  # rows 0-2 share three blocks, 3-4 two (as the cascade plan)
    out = cpu_paged_decode(q, blocks, table_tensor, lens_tensor, max(lens), scale, groups=groups, block_mass=mass)
    assert out.shape == q.shape and out.dtype == q.dtype
    for backend in TRITON_ON_CPU + ("torch",):
        paged_mass = torch.zeros(table_tensor.shape)
        paged = paged_decode_attention(q, blocks, table_tensor, lens_tensor, scale, block_mass=paged_mass,
                                       backend=backend)  # fmt: skip
        torch.testing.assert_close(out, paged, atol=2e-5, rtol=0)
        torch.testing.assert_close(mass, paged_mass, atol=1e-5, rtol=0)
    cascade_mass = torch.zeros(table_tensor.shape)
    cascade = cascade_decode_attention(q, blocks, plan_cascade(padded, lens, 16, CPU, min_saved_reads=0), scale,
                                       block_mass=cascade_mass)  # fmt: skip
    torch.testing.assert_close(out, cascade, atol=2e-5, rtol=0)
    torch.testing.assert_close(mass, cascade_mass, atol=1e-5, rtol=0)
    naive_out, naive_mass = naive(q, blocks, table_tensor, lens, scale)
    torch.testing.assert_close(out.double(), naive_out, atol=2e-5, rtol=0)
    torch.testing.assert_close(mass.double(), naive_mass, atol=1e-5, rtol=0)


def test_threads_change_nothing_and_mass_is_optional():
    blocks = pool("fp32", 3, 16, 64, CPU)
    tables = torch.tensor([r[0] + [0] * (5 - len(r[0])) for r in ROWS])
    lens = [r[1] for r in ROWS]
    q = torch.randn(len(ROWS), 9, 64, generator=torch.Generator().manual_seed(6))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_paged_decode(q, blocks, tables, torch.tensor(lens), max(lens), 0.125)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, cpu_paged_decode(q, blocks, tables, torch.tensor(lens), max(lens), 0.125,
                                             block_mass=torch.zeros(tables.shape)))  # fmt: skip


def test_reads_fp32_and_int8_and_declines_other_storage():
    assert can_read(pool("int8", 2, 16, 64, CPU)) and can_read(pool("int8", 2, 4, 64, CPU))
    assert not can_read(pool("fp16", 2, 16, 64, CPU))
    assert not can_read(pool("fp8", 2, 16, 64, CPU))
    assert not can_read(pool("fp32", 2, 16, 40, CPU))  # head_dim not a multiple of 16
    assert not can_read(pool("int8", 2, 16, 40, CPU))


@pytest.mark.parametrize("rows,grouped", [(4, False), (15, False), (16, True), (32, True)])
def test_a_step_groups_only_as_many_rows_as_the_matrix_products_pay_for(rows, grouped):
    """Rows sharing a 34-block observation: below MIN_GROUP_ROWS_IN_PLACE they read it row by row (measured faster
    here), from it on as one group; the attention is the same either way."""
    tables = [list(range(34)) + [34 + r] for r in range(rows)]
    lens = [34 * 16 + 9] * rows
    groups = plan_prefix_groups(tables, lens, 16, CPU)
    assert groups.starts.tolist() == ([0, rows] if grouped else [0])
    blocks = pool("fp32", 3, 16, 64, CPU, units=34 + rows)
    q = torch.randn(rows, 9, 64, generator=torch.Generator().manual_seed(rows))
    args = (q, blocks, torch.tensor(tables), torch.tensor(lens), max(lens), 0.125)
    forced = plan_prefix_groups(tables, lens, 16, CPU, min_rows=2)
    torch.testing.assert_close(cpu_paged_decode(*args, groups=groups), cpu_paged_decode(*args, groups=forced),
                               atol=2e-5, rtol=0)  # fmt: skip


def test_rows_of_subgroups_too_small_to_stand_alone_join_the_group_above():
    """Two tasks of 8 rows share a template block after a 34-block observation, and 4 more rows one of their own:
    none of those subgroups reaches MIN_GROUP_ROWS_IN_PLACE, so all 20 rows form one group over the observation."""
    observation = list(range(34))
    tables = ([observation + [40, 50 + r] for r in range(8)] + [observation + [41, 60 + r] for r in range(8)]
              + [observation + [42, 70 + r] for r in range(4)])  # fmt: skip
    lens = [36 * 16 + 3] * len(tables)
    groups = plan_prefix_groups(tables, lens, 16, CPU)
    assert groups.starts.tolist() == [0, 20] and groups.blocks.tolist() == [34]
    assert sorted(groups.rows.tolist()) == list(range(20))
    deep = plan_prefix_groups(tables, lens, 16, CPU, min_saved_reads=0, min_rows=2)  # each task its own group
    assert sorted(deep.blocks.tolist()) == [35, 35, 35]
