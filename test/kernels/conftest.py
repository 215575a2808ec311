"""Kernel tests: each Triton kernel against its torch reference (both run here), and the references against naive
math.  On a machine without CUDA the Triton kernels run in the Triton interpreter; with CUDA they run compiled.

``TRITON_INTERPRET`` has to be in the environment before triton is first imported (``import triton`` builds
triton.language's own helpers for one mode), not merely before a kernel is decorated.  This file is imported while
pytest collects, before any test runs, and the kernels package imports triton only on a kernel's first launch, so
setting it here is early enough unless a module collected earlier imports triton at import time; then the Triton
tests fail with the dispatcher's message, and the fix is ``TRITON_INTERPRET=1`` in the environment of the run.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from oxygen_ros.kernels import KVBlocks, KVQuantSpec, write_kv
from oxygen_ros.kernels.quant_spec import FP8_MAX

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture
def device() -> torch.device:
    return DEVICE


@dataclass
class PagedCase:
    """Sequences written into a pool through scrambled block tables, with the original fp32 K/V kept."""

    blocks: KVBlocks
    tables: torch.Tensor  # [B, max_blocks] int32, padding entries point at other sequences' blocks
    lens: torch.Tensor  # [B] int32
    k: list[torch.Tensor]  # per sequence [len, kvh, d] fp32, as written
    v: list[torch.Tensor]


def _make_paged(
    dtype: str, lens: list[int], block_size: int, num_kv_heads: int, head_dim: int, seed: int = 0,
    spare_blocks: int = 3,
) -> PagedCase:
    """K/V ~ N(0, 1) times a per token-head magnitude in [0.5, 1.5]; fp8 scales fitted to the data (absmax -> 448).

    Written with the torch ``write_kv`` in one call, shuffled, with interleaved slot -1 tokens that must not land.
    """
    gen = torch.Generator().manual_seed(seed)
    spec = KVQuantSpec.parse(dtype)
    counts = [-(-n // block_size) for n in lens]
    num_blocks = sum(counts) + spare_blocks
    blocks = KVBlocks.allocate(spec, num_blocks, block_size, num_kv_heads, head_dim, DEVICE)
    order = torch.randperm(num_blocks, generator=gen)
    tables = order[torch.randint(0, num_blocks, (len(lens), max(counts) + 1), generator=gen)]  # junk padding
    ks, vs, slots = [], [], []
    start = 0
    for row, (n, count) in enumerate(zip(lens, counts, strict=True)):
        tables[row, :count] = order[start : start + count]
        start += count
        pos = torch.arange(n)
        slots.append(tables[row, pos // block_size] * block_size + pos % block_size)
        magnitude = 0.5 + torch.rand(n, num_kv_heads, 1, generator=gen)
        ks.append(torch.randn(n, num_kv_heads, head_dim, generator=gen) * magnitude)
        vs.append(torch.randn(n, num_kv_heads, head_dim, generator=gen) * magnitude)
    k, v, slot = torch.cat(ks), torch.cat(vs), torch.cat(slots)
    junk = 5
    k = torch.cat([k, 100 * torch.randn(junk, num_kv_heads, head_dim, generator=gen)])
    v = torch.cat([v, 100 * torch.randn(junk, num_kv_heads, head_dim, generator=gen)])
    slot = torch.cat([slot, torch.full((junk,), -1)])
    shuffle = torch.randperm(len(slot), generator=gen)
    if spec.kind == "fp8":
        blocks.k_scale.copy_(torch.cat(ks).abs().amax(dim=(0, 2)) / FP8_MAX)
        blocks.v_scale.copy_(torch.cat(vs).abs().amax(dim=(0, 2)) / FP8_MAX)
    write_kv(blocks, slot[shuffle].to(DEVICE), k[shuffle].to(DEVICE), v[shuffle].to(DEVICE), backend="torch")
    return PagedCase(blocks, tables.int().to(DEVICE), torch.tensor(lens, dtype=torch.int32, device=DEVICE), ks, vs)


@pytest.fixture
def make_paged() -> Callable[..., PagedCase]:
    return _make_paged


def _assert_same_codes(a: torch.Tensor, b: torch.Tensor) -> None:
    """Bit equality of stored codes (fp8 compared as bytes: NaN-free, but -0 vs +0 would count)."""
    assert a.dtype == b.dtype
    if a.dtype == torch.float8_e4m3fn:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    mismatch = (a != b).sum().item()
    assert mismatch == 0, f"{mismatch} of {a.numel()} codes differ"


@pytest.fixture
def assert_same_codes() -> Callable[[torch.Tensor, torch.Tensor], None]:
    return _assert_same_codes
