"""Whole-block ops: dequantize into contiguous K/V (prefill over a cached prefix), requantize between formats
(tiers, fp8 rescaling) and copy (copy-on-write, moves between pools of one format)."""

import torch

from .dispatch import Backend, use_triton
from .quant import dequantize, select_scale, store_quantized, take_rows
from .quant_spec import KVBlocks


def gather_kv(
    blocks: KVBlocks, block_tables: torch.Tensor, num_tokens: int, dtype: torch.dtype = torch.float32,
    *, backend: Backend | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dequantized K and V of the first ``num_tokens`` tokens of every table row: ``[B, num_tokens, kvh, d]`` each in
    ``dtype`` (``LayerKV.gather`` with dequantization).  Rows shorter than ``num_tokens`` read whatever their
    padding entries point at; mask them downstream."""
    if num_tokens > block_tables.shape[1] * blocks.block_size:
        raise ValueError(f"gather_kv: {num_tokens} tokens exceed {block_tables.shape[1]} table entries of "
                         f"{blocks.block_size}")
    if use_triton(blocks.device, backend):
        from .triton_impl import blocks as impl

        return impl.gather_kv(blocks, block_tables, num_tokens, dtype)
    return gather_kv_torch(blocks, block_tables, num_tokens, dtype)


def gather_kv_torch(
    blocks: KVBlocks, block_tables: torch.Tensor, num_tokens: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference and CPU runtime path of ``gather_kv``."""
    index = block_tables[:, : -(-num_tokens // blocks.block_size)]
    k, v = (dequantize(take_rows(data, index), select_scale(scale, index)).flatten(1, 2)[:, :num_tokens].to(dtype)
            for data, scale in blocks.planes)
    return k, v


def requantize_blocks(
    src: KVBlocks, src_ids: torch.Tensor, dst: KVBlocks, dst_ids: torch.Tensor, *, backend: Backend | None = None
) -> None:
    """Block ``dst_ids[i]`` of ``dst`` := block ``src_ids[i]`` of ``src``, dequantized and requantized in dst's
    format (fp8: with dst's per-head scales, saturating at +-448), on any devices (cross-device runs in torch).

    Moves between tiers (e.g. fp16 -> int8 halves a block) and, with ``dst`` sharing ``src``'s codes under new
    scales, rescales fp8 blocks in place.  A block may be both read and written only by the same pair.
    """
    _check_pairs(src, src_ids, dst, dst_ids)
    if src.device == dst.device and use_triton(src.device, backend):
        from .triton_impl import blocks as impl

        impl.requantize_blocks(src, src_ids, dst, dst_ids)
    else:
        requantize_blocks_torch(src, src_ids, dst, dst_ids)


def requantize_blocks_torch(src: KVBlocks, src_ids: torch.Tensor, dst: KVBlocks, dst_ids: torch.Tensor) -> None:
    """Torch reference and CPU (and cross-device) path of ``requantize_blocks``."""
    dst_ids = dst_ids.to(dst.device)
    for (src_data, src_scale), (dst_data, dst_scale) in zip(src.planes, dst.planes, strict=True):
        values = dequantize(take_rows(src_data, src_ids), select_scale(src_scale, src_ids))
        store_quantized(dst_data, dst_scale, dst_ids, values.to(dst.device))


def copy_blocks(
    src: KVBlocks, src_ids: torch.Tensor, dst: KVBlocks, dst_ids: torch.Tensor, *, backend: Backend | None = None
) -> None:
    """Block ``dst_ids[i]`` of ``dst`` := block ``src_ids[i]`` of ``src``, bit for bit, int8's scales included.

    ``dst`` may be ``src`` (copy-on-write) or another pool of the same format, on any device (cross-device copies
    run in torch).  fp8 per-head scales belong to the layer and are not copied: both pools must already agree on
    them, else use ``requantize_blocks``.  A block may be both read and written only by the same pair.
    """
    _check_pairs(src, src_ids, dst, dst_ids)
    if src.k.dtype != dst.k.dtype:
        raise ValueError(f"copy_blocks copies one format; {src.spec.name} -> {dst.spec.name} needs requantize_blocks")
    if src.spec.kind == "fp8" and src.k_scale is not dst.k_scale and not (
        torch.equal(src.k_scale.cpu(), dst.k_scale.cpu()) and torch.equal(src.v_scale.cpu(), dst.v_scale.cpu())
    ):
        raise ValueError("copy_blocks between fp8 pools with different scales would change values; requantize")
    if src.device == dst.device and use_triton(src.device, backend):
        from .triton_impl import blocks as impl

        impl.copy_blocks(src, src_ids, dst, dst_ids)
    else:
        copy_blocks_torch(src, src_ids, dst, dst_ids)


def copy_blocks_torch(src: KVBlocks, src_ids: torch.Tensor, dst: KVBlocks, dst_ids: torch.Tensor) -> None:
    """Torch reference and CPU (and cross-device) path of ``copy_blocks``."""
    dst_ids = dst_ids.to(dst.device)
    for (src_data, src_scale), (dst_data, dst_scale) in zip(src.planes, dst.planes, strict=True):
        dst_data[dst_ids] = src_data[src_ids].to(dst.device)
        if src.spec.kind == "int8":
            dst_scale[dst_ids] = src_scale[src_ids].to(dst.device)


def _check_pairs(src: KVBlocks, src_ids: torch.Tensor, dst: KVBlocks, dst_ids: torch.Tensor) -> None:
    if src.k.shape[1:] != dst.k.shape[1:] or src_ids.shape != dst_ids.shape or src_ids.dim() != 1:
        raise ValueError(f"block pairs need equal block shapes and id counts: {tuple(src.k.shape[1:])} vs "
                         f"{tuple(dst.k.shape[1:])}, {tuple(src_ids.shape)} vs {tuple(dst_ids.shape)} ids")
