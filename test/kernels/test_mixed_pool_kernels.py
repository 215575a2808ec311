"""A mixed-format pool's layer operations through each kernel backend: decode merged across formats, gather, and
whole-block reads and writes across a wide block's units.  On CPU: the torch references and the Triton kernels
interpreted; on CUDA (scripts/gpu_check.sh): both compiled/run on the GPU, with units of 4 and 8 tokens (fp32 and
fp16 blocks next to int8).
"""

import pytest
import torch

from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.engine.eviction import LRUEviction
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.layout import KVLayout, PoolLayout
from oxygen_ros.kernels import KVBlocks, KVQuantSpec, gather_kv, write_kv
from oxygen_ros.kv.step_context import StepContext

BS, KVH, D, GROUP = 16, 2, 32, 3


@pytest.fixture(params=["triton", "torch"])
def backend(request, monkeypatch) -> str:
    monkeypatch.setenv("OXYGEN_KERNELS", request.param)
    return request.param


def _layouts(*names: str) -> PoolLayout:
    return PoolLayout(tuple(KVLayout(1, KVH, D, BS, KVQuantSpec.parse(n).storage_dtype) for n in names))


def _mixed_cache(names: tuple[str, ...], units: int, device: torch.device) -> tuple[KVCache, BlockPool]:
    pool_layout = _layouts(*names)
    widths = [pool_layout.units_per_block(f) for f in range(len(names))]
    pool = BlockPool(units, policy=LRUEviction(), units_per_block=widths)
    kv = KVCache(pool_layout, units, device)
    kv.attach(pool)
    return kv, pool


def _reference_values(
    spec_name: str, k: torch.Tensor, v: torch.Tensor, like: KVBlocks
) -> tuple[torch.Tensor, torch.Tensor]:
    """K/V [n, KVH, D] as a single-format pool of ``spec_name`` stores and reads them back, on the CPU with the torch
    references (independent of the mixed pool's views, plans and backend; fp8 with the per-head scales the mixed
    pool's calibrator chose, ``like``'s)."""
    blocks = KVBlocks.allocate(KVQuantSpec.parse(spec_name), -(-len(k) // BS), BS, KVH, D)
    if blocks.spec.kind == "fp8":
        blocks.k_scale.copy_(like.k_scale.cpu())
        blocks.v_scale.copy_(like.v_scale.cpu())
    write_kv(blocks, torch.arange(len(k)), k.cpu(), v.cpu(), backend="torch")
    keys, values = gather_kv(blocks, torch.arange(blocks.num_blocks)[None], len(k), backend="torch")
    return keys[0], values[0]


@pytest.mark.parametrize("names", [("fp32", "int8", "fp16"), ("int8", "fp8")], ids=["fp32+int8+fp16", "int8+fp8"])
def test_mixed_decode_and_gather_equal_attention_over_each_formats_storage(names, backend, device):
    """Three sequences whose blocks alternate formats (an observation prefix in one, the rest in another, a
    partial last block): the per-format kernels merged by log-sum-exp equal fp64 attention over the K/V each
    format stores; block mass goes back to the right table entries; gather returns every stored token."""
    kv, pool = _mixed_cache(names, 64, device)
    layer = kv.layers[0]
    gen = torch.Generator().manual_seed(3)
    lens = [37, 16, 50]
    formats = [[0, 0, 1], [1], [1, 0, 1, len(names) - 1]]  # per block
    tables = [[pool.allocate(1, f)[0] for f in row] for row in formats]
    k = [torch.randn(n, KVH, D, generator=gen) for n in lens]
    v = [torch.randn(n, KVH, D, generator=gen) for n in lens]
    slots = torch.tensor([t[i // BS] * BS + i % BS for t, n in zip(tables, lens) for i in range(n)], device=device)
    width = max(map(len, tables))
    block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], device=device)
    ctx = kv.steps.plan(StepContext(slots, lens, lens, block_tables))
    plan = ctx.format_plan
    layer.write(torch.cat(k).to(device), torch.cat(v).to(device), ctx.kv_writes)

    # Reference: each format's tokens of each row stored in a pool of that format alone.
    ref_k, ref_v, owner = [], [], []
    for row, n in enumerate(lens):
        fmt_of_token = torch.tensor([formats[row][i // BS] for i in range(n)])
        parts = [(f, (fmt_of_token == f).nonzero().flatten()) for f in range(len(names))]
        stored = [(f, idx, *_reference_values(names[f], k[row][idx], v[row][idx], layer.views[f]))
                  for f, idx in parts if len(idx)]  # fmt: skip
        ref_k.append(torch.cat([s[2] for s in stored]))
        ref_v.append(torch.cat([s[3] for s in stored]))
        owner.append(torch.cat([idx // BS for _, idx, _, _ in stored]))

    q = torch.randn(len(lens), KVH * GROUP, D, generator=gen)
    mass = torch.zeros(block_tables.shape, device=device)
    out = layer.decode(q.to(device), block_tables, torch.tensor(lens, device=device), D**-0.5, block_mass=mass,
                       plan=plan, lens=lens).cpu()  # fmt: skip
    mass = mass.cpu()
    for row in range(len(lens)):
        keys, values = (x.double().repeat_interleave(GROUP, dim=1) for x in (ref_k[row], ref_v[row]))
        probs = (torch.einsum("hd,nhd->hn", q[row].double(), keys) * D**-0.5).softmax(dim=-1)
        torch.testing.assert_close(out[row].double(), torch.einsum("hn,nhd->hd", probs, values), atol=2e-5, rtol=0)
        expected = torch.zeros(width, dtype=torch.float64).index_add_(0, owner[row], probs.sum(dim=0))
        torch.testing.assert_close(mass[row].double(), expected, atol=1e-5, rtol=0)

    keys, values = (x.cpu() for x in layer.gather(block_tables, max(lens), torch.float32, plan=plan, lens=lens))
    for row, n in enumerate(lens):
        torch.testing.assert_close(keys[row, :n], ref_k[row], atol=0, rtol=0)
        torch.testing.assert_close(values[row, :n], ref_v[row], atol=0, rtol=0)


def test_whole_blocks_read_and_written_across_units(backend, device):
    """What the tiers see of a mixed pool: a wide block read as one block_size-token block (copied out of its
    scattered units) and written back into other units, bit for bit."""
    kv, pool = _mixed_cache(("int8", "fp32"), 32, device)
    pool.allocate(1, 0)  # so the wide blocks' units are not in id order
    wide, narrow = pool.allocate(2, 1), pool.allocate(1, 0)
    gen = torch.Generator().manual_seed(5)
    ids = [wide[0], narrow[0]]
    slots = torch.tensor([b * BS + i for b in ids for i in range(BS)], device=device)
    ctx = StepContext(slots, [len(slots)], [len(slots)], torch.tensor([ids], device=device))
    k, v = (torch.randn(len(slots), KVH, D, generator=gen).to(device) for _ in "kv")
    kv.steps.plan(ctx)
    kv.layers[0].write(k, v, ctx.kv_writes)

    groups = kv.read_blocks(ids)
    assert sorted(p for positions, _, _ in groups for p in positions) == [0, 1]
    for positions, layers, indices in groups:
        for position, index in zip(positions, indices):
            stored = layers[0].k[index].float()
            if position == 0:  # fp32: exactly what was written
                torch.testing.assert_close(stored, k[:BS], atol=0, rtol=0)
    wide_group = next(g for g in groups if g[0] == [0])

    def fill(layers, indices, positions):
        assert positions == [0]
        layers[0].k[indices[0]] = wide_group[1][0].k[wide_group[2][0]]
        layers[0].v[indices[0]] = wide_group[1][0].v[wide_group[2][0]]

    kv.write_blocks([wide[1]], fill)
    ((_, copied, (index,)),) = kv.read_blocks([wide[1]])
    torch.testing.assert_close(copied[0].k[index], k[:BS], atol=0, rtol=0)
    torch.testing.assert_close(copied[0].v[index], v[:BS], atol=0, rtol=0)
