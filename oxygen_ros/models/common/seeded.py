"""Seeded random weights: no pi0.5 weights can be had offline, so the random-weight VLAs are built from a seed."""

from collections.abc import Callable
from typing import TypeVar

import torch

M = TypeVar("M", bound=torch.nn.Module)


def seeded_init(make: Callable[[], M], device: torch.device | str, dtype: torch.dtype, seed: int) -> M:
    """``make()`` built on ``device`` with its random init seeded (no pi0.5 weights are available offline), in
    ``dtype``, eval mode; the global RNG is untouched.  The same seed gives the same weights on the same device type."""
    device = torch.device(device)
    cuda_devices = []
    if device.type == "cuda":
        cuda_devices = [torch.cuda.current_device() if device.index is None else device.index]
    with torch.random.fork_rng(devices=cuda_devices), device:
        torch.manual_seed(seed)
        model = make()
    return model.to(dtype=dtype).eval()
