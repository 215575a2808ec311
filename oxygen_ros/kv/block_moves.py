"""Moves of KV blocks between the device pool and host memory, in the format of the destination.

Blocks cross the bus as stored codes (int8 / fp8 / 16-bit, with their scales), never as dequantized floats, and
every format change runs on the device, where the kernels are:

* host -> device (promotion from L1 or L2): the source blocks' codes are copied to the device on a side CUDA
  stream (from pinned memory, so the copy overlaps whatever the compute stream is running), the compute stream
  waits for that copy (an event, not a host sync), then requantizes into the pool blocks;
* device -> host (demotion, swap): requantized on the device into a compact buffer in the host's format, then
  copied out (synchronously: the caller reuses the pool blocks right after);
* same device: one ``requantize_blocks`` per layer.
"""

import torch

from oxygen_ros.kernels import KVBlocks, requantize_blocks


def take(blocks: KVBlocks, ids: torch.Tensor, device: torch.device, non_blocking: bool = False) -> KVBlocks:
    """Blocks ``ids`` of ``blocks`` as a compact ``KVBlocks`` on ``device`` (codes and scales as stored; fp8's
    per-head scales whole)."""
    per_block = blocks.spec.kind == "int8"

    def part(t: torch.Tensor | None, indexed: bool) -> torch.Tensor | None:
        if t is None:
            return None
        t = t[ids.to(t.device)] if indexed else t
        if non_blocking and t.device.type == "cpu":
            t = t.pin_memory()
        return t.to(device, non_blocking=non_blocking, copy=not indexed)  # never an alias of the source

    return KVBlocks(part(blocks.k, True), part(blocks.v, True), part(blocks.k_scale, per_block),
                    part(blocks.v_scale, per_block))  # fmt: skip


def compact_like(dst: KVBlocks, n: int, device: torch.device) -> KVBlocks:
    """An ``n``-block buffer in ``dst``'s format on ``device`` (fp8: with ``dst``'s per-head scales)."""
    out = KVBlocks.allocate(dst.spec, n, dst.block_size, dst.num_kv_heads, dst.head_dim, device)
    if dst.spec.kind == "fp8":
        out.k_scale.copy_(dst.k_scale)
        out.v_scale.copy_(dst.v_scale)
    return out


class BlockMover:
    """Moves blocks between layers' ``KVBlocks`` on any two devices (one instance per pool: it owns the side
    stream on CUDA); its requantizing copies run on ``kernels`` (the pool's ``AttentionBackend.kernels``)."""

    def __init__(self, device: torch.device, kernels: str = "auto") -> None:
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.kernels = kernels

    def move(self, src: list[KVBlocks], src_ids: list[int], dst: list[KVBlocks], dst_ids: list[int]) -> None:
        """Block ``dst_ids[i]`` of every ``dst`` layer := block ``src_ids[i]`` of the ``src`` layer, in dst's
        format."""
        if not src_ids:
            return
        s, d = torch.tensor(src_ids), torch.tensor(dst_ids)
        for a, b in zip(src, dst, strict=True):
            if a.device == b.device:
                requantize_blocks(a, s.to(a.device), b, d.to(b.device), backend=self.kernels)
            elif b.device.type == "cpu":
                self.to_host(a, s, b, d)
            else:
                self.to_device(a, s, b, d)

    def to_host(self, src: KVBlocks, s: torch.Tensor, dst: KVBlocks, d: torch.Tensor) -> None:
        """Blocks ``s`` of device ``src`` into blocks ``d`` of host ``dst``: requantized on the device, then copied."""
        staged = compact_like(dst, len(s), src.device)
        requantize_blocks(src, s.to(src.device), staged, torch.arange(len(s), device=src.device), backend=self.kernels)
        for (data, scale), (out_data, out_scale) in zip(staged.planes, dst.planes, strict=True):
            out_data[d] = data.to(dst.device)
            if scale is not None and scale.dim() > 1:  # int8's scales travel with their blocks
                out_scale[d] = scale.to(dst.device)

    def to_device(self, src: KVBlocks, s: torch.Tensor, dst: KVBlocks, d: torch.Tensor) -> None:
        """Blocks ``s`` of host ``src`` into blocks ``d`` of device ``dst``: codes copied (side stream), then
        requantized on the device."""
        device = dst.device
        if self.stream is None:  # a device without streams: copy, then requantize there
            staged = take(src, s, device)
        else:
            with torch.cuda.stream(self.stream):
                staged = take(src, s, device, non_blocking=True)
            compute = torch.cuda.current_stream(device)
            compute.wait_stream(self.stream)
            for t in (staged.k, staged.v, staged.k_scale, staged.v_scale):
                if t is not None:
                    t.record_stream(compute)  # freed only once the compute stream is done with it
        requantize_blocks(staged, torch.arange(len(s), device=device), dst, d.to(device), backend=self.kernels)
