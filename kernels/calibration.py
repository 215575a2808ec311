"""Online calibration of one layer's fp8 per-head scales: a running absolute max over a window of recent writes.

Codes already in the pool were written with the scales of their time, and the kernels read every block with the
layer's current scales, so a scale may only change together with the codes: ``Fp8Calibrator.update`` requantizes
the pool's blocks to the new scales (in place, ``requantize_blocks``) whenever it changes them.  Hysteresis keeps
that rare:

* grow at once when the window's absmax no longer fits (it would saturate at +-448);
* shrink only when the scale is ``shrink_factor`` times larger than the window needs.  e4m3 is a float format,
  so an oversized scale costs precision only for values pushed into its subnormal range; shrinking buys little
  and risks saturating older tokens larger than anything in the window, hence the wide margin.

New scales are ``absmax * headroom / 448`` so that values up to ``headroom`` times the window's absmax still fit.
The check reads the window on the host (one sync per update).
"""

import dataclasses
from collections.abc import Callable

import torch

from .blocks import requantize_blocks
from .dispatch import Backend
from .quant_spec import FP8_MAX, SCALE_DTYPE, KVBlocks

MIN_SCALE = 1e-12  # scale of a head that has only seen zeros; any later value grows it


class Fp8Calibrator:
    """Keeps one fp8 layer's K and V per-head scales fitted to the recent writes."""

    def __init__(
        self, num_kv_heads: int, *, window: int = 128, headroom: float = 2.0, shrink_factor: float = 16.0,
        device: torch.device | str = "cpu",
    ) -> None:
        if window < 1 or headroom < 1.0 or shrink_factor <= headroom:
            raise ValueError(f"need window >= 1, headroom >= 1 and shrink_factor > headroom, got {window}, "
                             f"{headroom}, {shrink_factor}")
        self.headroom = headroom
        self.shrink_factor = shrink_factor
        self._absmax = torch.zeros(window, 2, num_kv_heads, dtype=SCALE_DTYPE, device=device)  # ring: [write, K|V, h]
        self._writes = 0

    def observe(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Record the per-head absmax of one write's K and V ``[T, kvh, d]``."""
        self._absmax[self._writes % self._absmax.shape[0]] = torch.stack(
            [k.abs().amax(dim=(0, 2)), v.abs().amax(dim=(0, 2))]
        ).to(SCALE_DTYPE)
        self._writes += 1

    def target_scales(self) -> torch.Tensor:
        """``[2, kvh]`` (K, V) scales fitted to the window."""
        return (self._absmax.amax(dim=0) * (self.headroom / FP8_MAX)).clamp_min(MIN_SCALE)

    def update(
        self, blocks: KVBlocks, k: torch.Tensor, v: torch.Tensor,
        live_blocks: torch.Tensor | Callable[[], torch.Tensor] | None = None, *, backend: Backend | None = None,
    ) -> bool:
        """Observe a write about to go to ``blocks`` and, if the scales no longer fit, rescale ``blocks`` in place:
        requantize ``live_blocks`` (default: every block; a callable is asked only then, e.g. for the fp8 units of a
        mixed-format pool, whose other units hold other formats' bytes) to the new scales, then store them in
        ``blocks``.
        Call before ``write_kv``; returns whether the scales changed."""
        self.observe(k, v)
        target = self.target_scales()
        current = torch.stack([blocks.k_scale, blocks.v_scale])
        window_absmax = self._absmax.amax(dim=0)
        too_small = window_absmax > current * FP8_MAX
        too_large = current > target * self.shrink_factor
        if not bool((too_small | too_large).any()):
            return False
        if live_blocks is None:
            ids = torch.arange(blocks.num_blocks, device=blocks.device)
        else:
            ids = live_blocks() if callable(live_blocks) else live_blocks
        rescaled = dataclasses.replace(blocks, k_scale=target[0].contiguous(), v_scale=target[1].contiguous())
        requantize_blocks(blocks, ids, rescaled, ids, backend=backend)
        blocks.k_scale.copy_(target[0])
        blocks.v_scale.copy_(target[1])
        return True
