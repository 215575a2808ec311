"""KV storage formats and one layer's paged K/V storage in such a format.

Three kinds of storage share the pool layout ``[num_blocks, block_size, num_kv_heads, head_dim]``:

* ``none``: float passthrough (float32 / float16 / bfloat16), no scales.
* ``int8``: symmetric codes. Keys have one bf16 scale per (block, kv-head, channel) over the block's tokens
  (``k_scale`` ``[num_blocks, 1, num_kv_heads, head_dim]``, broadcasting over the block's tokens); values one fp32
  scale per token and head (``v_scale`` ``[num_blocks, block_size, num_kv_heads]``).  Keys have outlier channels
  (KIVI, KVQuant): one scale per token spends the code range on a few channels, one per channel over a block's 16
  tokens does not (``docs/quantization.md``). A block being filled is requantized as it grows
  (``quant.store_channel_tokens``). bf16 key scales: one per 16 tokens costs 0.125 B per element at block size 16,
  where fp32 would take int8 over 0.57x of fp16 at head_dim 64; bf16 has fp32's range (no subnormal scales for tiny
  channels) and the codes are computed against the rounded scale, so a block written at once is off by at most
  scale / 2; one filled in steps adds half of each scale a channel grew to (its earlier keys are rounded again), so
  its codes depend on how it was filled.  Value scales stay fp32 (4 B per token-head), |error| <= scale / 2.
* ``fp8``: float8_e4m3fn codes with one fp32 scale per kv-head per layer (``[num_kv_heads]``, K and V separately),
  set by online calibration (``Fp8Calibrator``); values beyond +-448 * scale saturate.  The scale is per layer, not
  per token, so it adds nothing per token.

A scale tensor's rank says how it applies to codes of rank 4: rank 4 per (block, channel), broadcast over tokens;
rank 3 per token and head; rank 1 per head.
"""

import math
from dataclasses import dataclass, field
from typing import Literal

import torch

from oxygen_ros.formats import KV_FORMATS

KVKind = Literal["none", "int8", "fp8"]

INT8_MAX = 127.0
INT8_MIN_ABSMAX = 1e-30  # floor of the int8 row absmax: 127 / absmax stays finite and zero rows get code 0
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
SCALE_DTYPE = torch.float32  # int8 value scales and fp8 head scales
KEY_SCALE_DTYPE = torch.bfloat16  # int8 key scales, one per (block, kv-head, channel)

Plane = tuple[torch.Tensor, torch.Tensor | None]  # codes and their scales (None for float storage)

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_NAMES: dict[str, torch.dtype] = {name: getattr(torch, dtype) for name, dtype in KV_FORMATS.items()}


@dataclass(frozen=True)
class KVQuantSpec:
    """A KV storage format; the kind follows from the storage dtype, so kernels infer it from the tensors."""

    storage_dtype: torch.dtype
    kind: KVKind = field(init=False)

    def __post_init__(self) -> None:
        if self.storage_dtype in _FLOAT_DTYPES:
            kind: KVKind = "none"
        elif self.storage_dtype == torch.int8:
            kind = "int8"
        elif self.storage_dtype == torch.float8_e4m3fn:
            kind = "fp8"
        else:
            raise ValueError(f"unsupported KV storage dtype {self.storage_dtype}; use one of {sorted(_NAMES)}")
        object.__setattr__(self, "kind", kind)

    @classmethod
    def parse(cls, name: str) -> "KVQuantSpec":
        """Spec from a config string such as ``"fp16"``, ``"bf16"``, ``"int8"`` or ``"fp8"``."""
        try:
            return cls(_NAMES[name.lower()])
        except KeyError:
            raise ValueError(f"unknown KV dtype {name!r}; expected one of {sorted(_NAMES)}") from None

    @property
    def name(self) -> str:
        return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(self.storage_dtype, self.kind)

    def scale_shapes(
        self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int
    ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """Shapes of the K and V scale tensors, None when the format has no scales."""
        if self.kind == "int8":
            return (num_blocks, 1, num_kv_heads, head_dim), (num_blocks, block_size, num_kv_heads)
        if self.kind == "fp8":
            return (num_kv_heads,), (num_kv_heads,)
        return None

    def scale_dtypes(self) -> tuple[torch.dtype, torch.dtype]:
        """dtypes of the K and V scale tensors (see the module docstring)."""
        return (KEY_SCALE_DTYPE, SCALE_DTYPE) if self.kind == "int8" else (SCALE_DTYPE, SCALE_DTYPE)

    def block_bytes(self, block_size: int, num_kv_heads: int, head_dim: int) -> int:
        """Bytes one block stores in one layer: K and V codes plus the scales that belong to the block (int8's).

        fp8's per-head scales belong to the layer, not to blocks, and are left out (see ``KVBlocks.nbytes``).
        """
        codes = 2 * block_size * num_kv_heads * head_dim * self.storage_dtype.itemsize
        if self.kind != "int8":
            return codes
        k_shape, v_shape = self.scale_shapes(1, block_size, num_kv_heads, head_dim)
        k_dtype, v_dtype = self.scale_dtypes()
        return codes + math.prod(k_shape) * k_dtype.itemsize + math.prod(v_shape) * v_dtype.itemsize


@dataclass
class KVBlocks:
    """One layer's paged K and V in one format: the tensors every kernel in this package reads or writes.

    ``k``/``v``: ``[num_blocks, block_size, num_kv_heads, head_dim]`` in the storage dtype, contiguous (kernels
    address a token by its flat slot ``block * block_size + offset``).  ``k_scale``/``v_scale``: see
    ``KVQuantSpec.scale_shapes``; fp8 scales may be replaced (``dataclasses.replace``) to view the same codes under
    other scales, which is how the calibrator rescales a pool in place.
    """

    k: torch.Tensor
    v: torch.Tensor
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.k.dim() != 4 or self.k.shape != self.v.shape or self.k.dtype != self.v.dtype:
            raise ValueError(f"K {tuple(self.k.shape)} {self.k.dtype} and V {tuple(self.v.shape)} {self.v.dtype} "
                             "must share one [num_blocks, block_size, num_kv_heads, head_dim] shape and dtype")
        if not (self.k.is_contiguous() and self.v.is_contiguous()):
            raise ValueError("K/V block tensors must be contiguous")
        shapes = self.spec.scale_shapes(self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        dtypes = self.spec.scale_dtypes()
        for i, (name, scale) in enumerate((("k_scale", self.k_scale), ("v_scale", self.v_scale))):
            if shapes is None and scale is not None:
                raise ValueError(f"{self.spec.name} storage has no scales but {name} was given")
            if shapes is not None and (scale is None or tuple(scale.shape) != shapes[i] or scale.dtype != dtypes[i]
                                       or not scale.is_contiguous()):  # fmt: skip
                got = None if scale is None else (tuple(scale.shape), scale.dtype)
                raise ValueError(f"{self.spec.name} storage needs a contiguous {dtypes[i]} {name} of shape "
                                 f"{shapes[i]}, got {got}")

    @classmethod
    def allocate(
        cls, spec: KVQuantSpec, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
        device: torch.device | str = "cpu",
    ) -> "KVBlocks":
        """Zeroed storage; fp8 scales start at 1.0 until the calibrator sets them."""
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        codes = [torch.zeros(shape, dtype=spec.storage_dtype, device=device) for _ in "kv"]
        shapes = spec.scale_shapes(num_blocks, block_size, num_kv_heads, head_dim)
        if shapes is None:
            return cls(*codes)
        scales = [torch.ones(s, dtype=d, device=device) for s, d in zip(shapes, spec.scale_dtypes(), strict=True)]
        return cls(*codes, *scales)

    @property
    def spec(self) -> KVQuantSpec:
        return KVQuantSpec(self.k.dtype)

    @property
    def num_blocks(self) -> int:
        return self.k.shape[0]

    @property
    def block_size(self) -> int:
        return self.k.shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.k.shape[2]

    @property
    def head_dim(self) -> int:
        return self.k.shape[3]

    @property
    def device(self) -> torch.device:
        return self.k.device

    @property
    def planes(self) -> tuple[Plane, Plane]:
        """``((k, k_scale), (v, v_scale))``: one plane at a time; a scale's rank says how it applies (see the module
        docstring), so code that dequantizes by rank handles K and V alike."""
        return (self.k, self.k_scale), (self.v, self.v_scale)

    @property
    def nbytes(self) -> int:
        """Every byte this layer's storage holds, scales included."""
        tensors = [self.k, self.v, self.k_scale, self.v_scale]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)
