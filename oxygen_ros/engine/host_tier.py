"""L1 of the KV tiers: a preallocated arena of blocks in host memory (pinned when the pool is on CUDA).

Format ``int8`` (the default) stores float layers as int8, keys with per-channel scales over the block and values
with per token-head ones (fp16 -> int8 about 1.8:1, near the article's 2:1; fp32 -> int8 about 3.7:1 at head_dim 64)
and int8 / fp8 layers as they are; ``pool`` stores every layer in the pool's own
format, so a block comes back bit for bit.  Moves in and out go through a ``BlockMover`` (``block_moves.py``): one
requantization per layer over all the blocks of a call, on the pool's device, with compact codes crossing the bus.
Replacement is LRU over blocks; a block pushed out is handed back to the caller (for the disk tier) before its slot
is reused.
"""

from collections import OrderedDict
from dataclasses import replace

import torch

from oxygen_ros.kv.block_moves import BlockMover, take
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.kernels import KVBlocks, KVQuantSpec

HOST_FORMATS = ("int8", "pool")


def host_layout(layout: KVLayout, fmt: str) -> KVLayout:
    """The pool layout with float storage turned into int8 (``int8``) or unchanged (``pool``)."""
    if fmt == "pool":
        return layout

    def compress(dtype: torch.dtype) -> torch.dtype:
        return torch.int8 if KVQuantSpec(dtype).kind == "none" else dtype

    return replace(layout, dtype=compress(layout.dtype), full_precision_dtype=compress(layout.full_precision_dtype))


def take_blocks(layers: list[KVBlocks], index: int) -> list[KVBlocks]:
    """A copy of block ``index`` of every layer as one-block ``KVBlocks`` on the CPU (fp8: the layer's scales)."""
    return [take(blocks, torch.tensor([index]), torch.device("cpu")) for blocks in layers]


class HostTier:
    def __init__(
        self, layout: KVLayout, capacity_bytes: int, fmt: str = "int8", device: torch.device = torch.device("cpu"),
        kernels: str = "auto",
    ) -> None:
        """``device``: the pool's; on CUDA the arena is pinned and promotions copy on a side stream. ``kernels``: the
        pool's kernel backend, for the requantizing copies."""
        if fmt not in HOST_FORMATS:
            raise ValueError(f"cpu_tier_format must be one of {HOST_FORMATS}, got {fmt!r}")
        self.layout = host_layout(layout, fmt)
        self.num_slots = self.layout.blocks_for_budget(capacity_bytes)
        if self.num_slots < 1:
            raise ValueError(f"cpu_tier_bytes={capacity_bytes} holds no block of {self.layout.bytes_per_block} bytes")
        self.capacity_bytes = self.num_slots * self.layout.bytes_per_block
        self.layers = [self._arena(i, pin=device.type == "cuda") for i in range(layout.num_layers)]
        self.mover = BlockMover(device, kernels)
        self._slots: OrderedDict[bytes, int] = OrderedDict()  # block hash -> slot, least recently used first
        self._free = list(range(self.num_slots - 1, -1, -1))
        self._fp8_scales_set = False

    def _arena(self, layer: int, pin: bool) -> KVBlocks:
        lay = self.layout
        blocks = KVBlocks.allocate(lay.layer_spec(layer), self.num_slots, lay.block_size, lay.num_kv_heads, lay.head_dim)
        if not pin:
            return blocks
        return KVBlocks(*(None if t is None else t.pin_memory() for t in (blocks.k, blocks.v, blocks.k_scale,
                                                                          blocks.v_scale)))  # fmt: skip

    @property
    def num_blocks(self) -> int:
        return len(self._slots)

    @property
    def used_bytes(self) -> int:
        return self.num_blocks * self.layout.bytes_per_block

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._slots

    def touch(self, hashes: list[bytes]) -> None:
        """Mark blocks as just used, so the moves about to happen do not push them out."""
        for h in hashes:
            if h in self._slots:
                self._slots.move_to_end(h)

    def items(self) -> list[tuple[bytes, int]]:
        """(block hash, slot) of every stored block, least recently used first."""
        return list(self._slots.items())

    def discard(self, block_hash: bytes) -> None:
        """Forget a block (a swapped request's own block once it is back in the pool); its slot is free again."""
        slot = self._slots.pop(block_hash, None)
        if slot is not None:
            self._free.append(slot)

    def put(self, hashes: list[bytes], src: list[KVBlocks], src_ids: list[int]) -> list[tuple[bytes, list[KVBlocks]]]:
        """Store block ``src_ids[i]`` of the ``src`` layers under ``hashes[i]``; returns the blocks pushed out."""
        self.touch(hashes)
        new = [(h, i) for h, i in dict(zip(hashes, src_ids)).items() if h not in self._slots]
        pushed = [(h, take_blocks(src, i)) for h, i in new[: max(len(new) - self.num_slots, 0)]]  # never fit
        new = new[len(pushed) :]
        if not new:
            return pushed
        while len(self._free) < len(new):
            old_hash, slot = self._slots.popitem(last=False)
            pushed.append((old_hash, take_blocks(self.layers, slot)))
            self._free.append(slot)
        slots = [self._free.pop() for _ in new]
        try:
            self._init_fp8_scales(src)
            self.mover.move(src, [i for _, i in new], self.layers, slots)
        except BaseException:  # nothing stored: the slots are free again (what was pushed out for them is lost, as
            self._free.extend(slots)  # an eviction without tiers loses it)
            raise
        for (h, _), slot in zip(new, slots):
            self._slots[h] = slot
        return pushed

    def restore(self, hashes: list[bytes], dst: list[KVBlocks], dst_ids: list[int]) -> None:
        """Write the stored blocks ``hashes`` into blocks ``dst_ids`` of the ``dst`` layers (in dst's format)."""
        self.touch(hashes)
        self.mover.move(self.layers, [self._slots[h] for h in hashes], dst, dst_ids)

    def _init_fp8_scales(self, src: list[KVBlocks]) -> None:
        """fp8 layers keep the pool's per-head scales as of the first block stored (the pool's are calibrated by
        then); later blocks are requantized to them."""
        if self._fp8_scales_set:
            return
        for mine, theirs in zip(self.layers, src):
            if mine.spec.kind == "fp8" and theirs.spec.kind == "fp8":
                mine.k_scale.copy_(theirs.k_scale)
                mine.v_scale.copy_(theirs.v_scale)
        self._fp8_scales_set = True  # (after the copies: one that failed is tried again with the next block)
