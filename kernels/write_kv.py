"""``write_kv``: store new tokens' K/V in pool blocks, quantizing on the fly (the pool's write path)."""

import torch

from .dispatch import Backend, use_triton
from .quant import BlockFills, store_channel_tokens, store_quantized
from .quant_spec import KVBlocks


def write_kv(
    blocks: KVBlocks, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, backend: Backend | None = None,
    all_stored: bool = False, fills: BlockFills | None = None,
) -> None:
    """Store K/V ``[T, kvh, d]`` (fp32/fp16/bf16) at flat slots ``slot_mapping`` ``[T]`` (``block * block_size +
    offset``); slots < 0 are skipped (tokens whose K/V is never kept). ``all_stored``: the caller vouches that no
    slot is < 0, so the torch path needs no mask (a boolean mask is a host sync). ``fills``: the stored slots'
    ``BlockFills`` for int8 keys on the torch path, planned with the step (else read from ``slot_mapping`` here).

    Float storage converts; int8 values get each token-head's scale from its absmax, int8 keys requantize every
    block written to with per-channel scales over its tokens (``quant.store_channel_tokens``: the tokens written to
    one block are its next ones, consecutive and in order in ``slot_mapping``, as a sequence fills its last block);
    fp8 divides by ``blocks``' per-head scales (keep them current with ``Fp8Calibrator.update`` first) and
    saturates at +-448.  Slots must be distinct.
    """
    if k.shape != v.shape or k.shape[1:] != blocks.k.shape[2:] or slot_mapping.shape != k.shape[:1]:
        raise ValueError(f"write_kv: k {tuple(k.shape)}, v {tuple(v.shape)}, slots {tuple(slot_mapping.shape)} do "
                         f"not fit blocks of {tuple(blocks.k.shape[2:])} per token")
    if use_triton(blocks.device, backend):
        from .triton_impl import write_kv as impl

        impl.write_kv(blocks, slot_mapping, k, v, all_stored)
    else:
        write_kv_torch(blocks, slot_mapping, k, v, all_stored, fills)


def write_kv_torch(
    blocks: KVBlocks, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor, all_stored: bool = False,
    fills: BlockFills | None = None,
) -> None:
    """Torch reference and CPU runtime path of ``write_kv``."""
    if not all_stored:
        keep = slot_mapping >= 0
        slot_mapping, k, v = slot_mapping[keep], k[keep], v[keep]
    for (data, scale), x in zip(blocks.planes, (k, v), strict=True):
        if scale is not None and scale.dim() == data.dim():
            fills = fills or BlockFills.of(slot_mapping.tolist(), blocks.block_size, blocks.device)
            store_channel_tokens(data, scale, fills, x)
            continue
        flat_scale = scale.view(-1, scale.shape[-1]) if scale is not None and scale.dim() > 1 else scale
        store_quantized(data.view(-1, *data.shape[2:]), flat_scale, slot_mapping, x)
