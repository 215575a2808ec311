"""The pool's storage: preallocated K/V blocks, one ``KVBlocks`` per layer, in that layer's storage format.

Block ``i`` of every layer belongs to the same owner; the block pool hands out block ids and this class only holds
the bytes.  Layout per layer: ``[num_blocks, block_size, num_kv_heads, head_dim]`` (+ scales for int8 / fp8), so a
block table row indexes dim 0.  Layers may differ in format: ``kv_full_precision_layers`` keeps the layers that
quantization hurts most at full precision while the rest are int8 or fp8.
"""

from dataclasses import dataclass

import torch

from oxygen_ros.kernels import (
    Fp8Calibrator,
    KVBlocks,
    KVQuantSpec,
    copy_blocks,
    gather_kv,
    paged_decode_attention,
    write_kv,
)


@dataclass(frozen=True)
class KVLayout:
    """Shape and storage formats of the KV pool; bytes per block follow from it."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: torch.dtype  # storage dtype of every layer (float32/16, bfloat16, int8, float8_e4m3fn) ...
    full_precision_layers: tuple[int, ...] = ()  # ... except these, stored in ``full_precision_dtype``
    full_precision_dtype: torch.dtype = torch.float32

    def layer_spec(self, layer: int) -> KVQuantSpec:
        dtype = self.full_precision_dtype if layer in self.full_precision_layers else self.dtype
        return KVQuantSpec(dtype)

    @property
    def name(self) -> str:
        """E.g. ``int8`` or ``int8(fp32:0,29)``; part of every prefix-cache key, so formats never share KV."""
        name = KVQuantSpec(self.dtype).name
        if not self.full_precision_layers:
            return name
        layers = ",".join(map(str, self.full_precision_layers))
        return f"{name}({KVQuantSpec(self.full_precision_dtype).name}:{layers})"

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token over every layer, per-token scales included."""
        per_layer = (2 * self.num_kv_heads * self.layer_spec(i).bytes_per_token_head(self.head_dim)
                     for i in range(self.num_layers))
        return sum(per_layer)

    @property
    def bytes_per_block(self) -> int:
        return self.bytes_per_token * self.block_size

    def blocks_for_budget(self, budget_bytes: int) -> int:
        return budget_bytes // self.bytes_per_block


class LayerKV:
    """One layer's blocks and the three operations attention needs, each dispatched to a kernel."""

    def __init__(self, blocks: KVBlocks) -> None:
        self.blocks = blocks
        self.block_size = blocks.block_size
        self.calibrator = (
            Fp8Calibrator(blocks.num_kv_heads, device=blocks.device) if blocks.spec.kind == "fp8" else None
        )

    def write(self, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new tokens' K/V [T, KVH, D] at flat slots (quantizing); slots < 0 are skipped.

        The fp8 calibrator sees only the tokens that are stored: the action expert's K/V (all slots -1, ten denoising
        steps per chunk) would otherwise fill its window with values the pool never holds and move the scales.
        """
        if self.calibrator is not None:
            keep = slot_mapping >= 0
            if bool(keep.any()):
                self.calibrator.update(self.blocks, k[keep], v[keep])
        write_kv(self.blocks, slot_mapping, k, v)

    def gather(
        self, block_tables: torch.Tensor, num_tokens: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized K/V of the first ``num_tokens`` tokens of each table row: [B, num_tokens, KVH, D] each."""
        return gather_kv(self.blocks, block_tables, num_tokens, dtype)

    def decode(
        self, q: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
        block_mass: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One query per sequence [B, H, D] over its whole context in the pool (the paged decode kernel)."""
        return paged_decode_attention(q, self.blocks, block_tables, context_lens, scale, block_mass=block_mass)


class KVCache:
    """All layers' blocks, allocated once up front so serving never allocates KV memory."""

    def __init__(self, layout: KVLayout, num_blocks: int, device: torch.device) -> None:
        self.layout = layout
        self.num_blocks = num_blocks
        self.layers = [
            LayerKV(
                KVBlocks.allocate(
                    layout.layer_spec(i), num_blocks, layout.block_size, layout.num_kv_heads, layout.head_dim, device
                )
            )
            for i in range(layout.num_layers)
        ]

    @property
    def total_bytes(self) -> int:
        return sum(layer.blocks.nbytes for layer in self.layers)

    def copy_blocks(self, src: list[int], dst: list[int]) -> None:
        """Copy whole blocks (codes and scales) in every layer: copy-on-write of a shared partial block."""
        device = self.layers[0].blocks.device
        s, d = torch.tensor(src, device=device), torch.tensor(dst, device=device)
        for layer in self.layers:
            copy_blocks(layer.blocks, s, layer.blocks, d)
