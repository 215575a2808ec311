"""Decode contexts in a paged pool shared by the decode-attention tests: rows whose block tables share blocks as a
run or scattered, rows alone, ragged lengths; a pool of random K/V in a format; fp64 attention over what it stores."""

import torch

from oxygen_ros.kernels import KVBlocks, KVQuantSpec, gather_kv, write_kv

NUM_BLOCKS = 48

# Rows (block ids, context length).  0-2 share 3 consecutive blocks (read as a view), 3-4 share 2 scattered blocks,
# 5 is alone on a consecutive run, 6 alone on scattered blocks, 7 starts like 0-2 but leaves them after one block
# (0-2 still share three), 8 ends exactly on a block boundary (its last block is its own).
ROWS = [
    ([4, 5, 6, 20, 21], 70),
    ([4, 5, 6, 22], 49),
    ([4, 5, 6, 23, 24], 80),
    ([30, 12, 40], 45),
    ([30, 12, 41, 42], 60),
    ([8, 9, 10], 33),
    ([44, 2, 35], 40),
    ([4, 26], 17),
    ([14, 15], 32),
    ([9, 7, 11, 13], 49),  # alone on blocks whose first and last ids are a run apart, yet no run
]
def pool(name: str, kv_heads: int, block_size: int, head_dim: int, device: torch.device,
         units: int = NUM_BLOCKS) -> KVBlocks:  # fmt: skip
    spec = KVQuantSpec.parse(name)
    blocks = KVBlocks.allocate(spec, units, block_size, kv_heads, head_dim, device)
    gen = torch.Generator().manual_seed(11)
    k, v = (torch.randn(units * block_size, kv_heads, head_dim, generator=gen).to(device) for _ in "kv")
    write_kv(blocks, torch.arange(units * block_size, device=device), k, v)
    return blocks


def naive(q: torch.Tensor, blocks: KVBlocks, tables: torch.Tensor, lens: list[int], scale: float):
    """fp64 attention over the K/V as stored (gathered and dequantized): out [B, H, d], mass summed over heads
    [B, max_blocks]."""
    keys, values = gather_kv(blocks, tables, max(lens), backend="torch")
    group = q.shape[1] // blocks.num_kv_heads
    outs, masses = [], []
    for b, n in enumerate(lens):
        k, v = (x[b, :n].double().cpu().repeat_interleave(group, dim=1) for x in (keys, values))
        probs = (torch.einsum("hd,nhd->hn", q[b].double().cpu(), k) * scale).softmax(dim=-1)
        outs.append(torch.einsum("hn,nhd->hd", probs, v))
        per_token = probs.sum(dim=0)
        mass = torch.zeros(tables.shape[1], dtype=torch.float64)
        mass.index_add_(0, torch.arange(n) // blocks.block_size, per_token)
        masses.append(mass)
    return torch.stack(outs), torch.stack(masses)
