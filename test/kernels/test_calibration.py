"""Fp8Calibrator: scales follow a window of recent writes, and stored blocks are rescaled with them."""

import pytest
import torch

from oxygen_ros.kernels import Fp8Calibrator, KVBlocks, KVQuantSpec, gather_kv, write_kv
from oxygen_ros.kernels.quant_spec import FP8_MAX


def _pool(device) -> KVBlocks:
    return KVBlocks.allocate(KVQuantSpec.parse("fp8"), 4, 16, 2, 64, device)


def _tokens(absmax: float, n: int, device, seed: int = 0) -> torch.Tensor:
    x = torch.rand(n, 2, 64, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    x[0, :, 0] = 1.0  # pins the per-head absmax
    return (x * absmax).to(device)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_grows_at_once_and_keeps_stored_values(backend, device):
    blocks, calibrator = _pool(device), Fp8Calibrator(2, window=4, device=device)
    small = _tokens(1.0, 16, device)
    assert calibrator.update(blocks, small, small, backend=backend)  # 1.0 initial scale is 32x too large
    torch.testing.assert_close(blocks.k_scale, torch.full((2,), 2.0 / FP8_MAX, device=device))
    write_kv(blocks, torch.arange(16, device=device), small, small, backend=backend)
    table = torch.zeros(1, 1, dtype=torch.int32, device=device)
    before, _ = gather_kv(blocks, table, 16)

    big = _tokens(10.0, 16, device, seed=1)
    assert calibrator.update(blocks, big, big, backend=backend)  # 10 > 448 * scale: would saturate
    torch.testing.assert_close(blocks.v_scale, torch.full((2,), 20.0 / FP8_MAX, device=device))
    after, _ = gather_kv(blocks, table, 16)
    # Requantized once more on a 10x coarser grid: within half a step of that grid (or its subnormal step).
    bound = torch.maximum(before.abs() * 2**-4, torch.full_like(before, 2**-10 * 20.0 / FP8_MAX))
    assert torch.all((after - before).abs() <= bound)


def test_steady_writes_keep_scales(device):
    blocks, calibrator = _pool(device), Fp8Calibrator(2, device=device)
    x = _tokens(3.0, 8, device)
    calibrator.update(blocks, x, x)
    for seed in range(5):
        y = _tokens(2.0, 8, device, seed)
        assert not calibrator.update(blocks, y, y)


def test_shrinks_once_the_window_forgets(device):
    blocks, calibrator = _pool(device), Fp8Calibrator(2, window=3, device=device)
    big = _tokens(100.0, 4, device)
    calibrator.update(blocks, big, big)
    small = _tokens(1.0, 4, device)
    changed = [calibrator.update(blocks, small, small) for _ in range(3)]
    assert changed == [False, False, True]  # the big write leaves the 3-write window on the third small one
    torch.testing.assert_close(blocks.k_scale, torch.full((2,), 2.0 / FP8_MAX, device=device))


def test_rejects_bad_settings():
    with pytest.raises(ValueError, match="shrink_factor > headroom"):
        Fp8Calibrator(2, headroom=4.0, shrink_factor=2.0)
