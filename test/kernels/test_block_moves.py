"""Blocks moved between a device pool and host memory keep their values in every format pair the tiers use.

On CUDA (scripts/gpu_check.sh) the pool is on the GPU, so the copies cross the bus on the side stream; here both
sides are CPU tensors and the same staging code runs without a stream.  Tolerance: one rounding to the host format
and one back to the pool's (int8: absmax / 254 per step, fp8: 2^-4 relative, 16-bit formats: 2^-8 relative).
"""

import pytest
import torch

from oxygen_ros.kv.block_moves import BlockMover, take
from oxygen_ros.kernels import KVBlocks, KVQuantSpec, gather_kv, write_kv

ATOL = {"fp32": 1e-6, "fp16": 4e-3, "bf16": 3e-2, "int8": 4e-2, "fp8": 0.3}


def _blocks(name: str, n: int, device) -> KVBlocks:
    return KVBlocks.allocate(KVQuantSpec.parse(name), n, 16, 2, 64, device)


def _values(blocks: KVBlocks, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    k, v = gather_kv(blocks, torch.tensor([ids], device=blocks.device), 16 * len(ids), backend="torch")
    return k.cpu(), v.cpu()


@pytest.mark.parametrize("pool,host", [("fp32", "int8"), ("fp16", "int8"), ("bf16", "bf16"), ("int8", "int8"),
                                       ("fp8", "fp8")])  # fmt: skip
def test_blocks_go_to_the_host_and_back(pool, host, device):
    gen = torch.Generator().manual_seed(0)
    pool_blocks, host_blocks = _blocks(pool, 6, device), _blocks(host, 4, "cpu")
    src = [1, 4, 3]
    slots = torch.tensor([b * 16 + i for b in src for i in range(16)], device=device)
    k, v = (torch.randn(len(slots), 2, 64, generator=gen).to(device) for _ in "kv")
    write_kv(pool_blocks, slots, k, v)
    before = _values(pool_blocks, src)
    mover = BlockMover(torch.device(device))

    mover.to_host(pool_blocks, torch.tensor(src), host_blocks, torch.tensor([2, 0, 3]))
    for got, want in zip(_values(host_blocks, [2, 0, 3]), before, strict=True):
        torch.testing.assert_close(got, want, atol=ATOL[host], rtol=0)
    mover.to_device(host_blocks, torch.tensor([2, 0, 3]), pool_blocks, torch.tensor([0, 2, 5]))
    for got, want in zip(_values(pool_blocks, [0, 2, 5]), before, strict=True):
        torch.testing.assert_close(got, want, atol=ATOL[host] + ATOL[pool], rtol=0)
    mover.move([pool_blocks], [1], [host_blocks], [1])  # the dispatching entry point: across devices on CUDA
    torch.testing.assert_close(_values(host_blocks, [1])[0], before[0][:, :16], atol=ATOL[host], rtol=0)


def test_take_copies_never_aliases():
    blocks = _blocks("fp8", 3, "cpu")
    taken = take(blocks, torch.tensor([2]), torch.device("cpu"))
    assert taken.num_blocks == 1 and taken.k_scale.data_ptr() != blocks.k_scale.data_ptr()
    blocks.k_scale.fill_(7.0)  # the pool's calibrator rescaling later must not change a block already taken
    assert float(taken.k_scale.max()) == 1.0
