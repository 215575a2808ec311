"""KV storage formats and one layer's paged K/V storage in such a format.

Three kinds of storage share the pool layout ``[num_blocks, block_size, num_kv_heads, head_dim]``:

* ``none``: float passthrough (float32 / float16 / bfloat16), no scales.
* ``int8``: symmetric, one fp32 scale per token and head (``[num_blocks, block_size, num_kv_heads]``), so every
  token-head row uses its full code range and |error| <= scale / 2 per element.  fp32 rather than fp16 scales: the
  2 extra bytes cost 1.6% of an fp16 token-head at head_dim 64 (68 B vs 66 B, both well under 0.57 * 128 B = 73 B),
  and fp16 scales would go subnormal (lose precision) for rows with absmax below ~8e-3 and overflow past 65504 * 127.
* ``fp8``: float8_e4m3fn codes with one fp32 scale per kv-head per layer (``[num_kv_heads]``, K and V separately),
  set by online calibration (``Fp8Calibrator``); values beyond +-448 * scale saturate.  The scale is per layer, not
  per token, so it adds nothing per token.
"""

from dataclasses import dataclass, field
from typing import Literal

import torch

from oxygen_ros.formats import KV_FORMATS

KVKind = Literal["none", "int8", "fp8"]

INT8_MAX = 127.0
INT8_MIN_ABSMAX = 1e-30  # floor of the int8 row absmax: 127 / absmax stays finite and zero rows get code 0
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
SCALE_DTYPE = torch.float32

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

    def scale_shape(self, num_blocks: int, block_size: int, num_kv_heads: int) -> tuple[int, ...] | None:
        """Shape of one plane's (K's or V's) scale tensor, None when the format has no scales."""
        if self.kind == "int8":
            return (num_blocks, block_size, num_kv_heads)
        if self.kind == "fp8":
            return (num_kv_heads,)
        return None

    def bytes_per_token_head(self, head_dim: int) -> int:
        """Bytes one token stores for one kv-head in one plane: codes plus per-token scales.

        fp8's per-head scales belong to the layer, not to tokens, and are left out (see ``KVBlocks.nbytes``).
        """
        data = head_dim * self.storage_dtype.itemsize
        return data + (SCALE_DTYPE.itemsize if self.kind == "int8" else 0)


@dataclass
class KVBlocks:
    """One layer's paged K and V in one format: the tensors every kernel in this package reads or writes.

    ``k``/``v``: ``[num_blocks, block_size, num_kv_heads, head_dim]`` in the storage dtype, contiguous (kernels
    address a token by its flat slot ``block * block_size + offset``).  ``k_scale``/``v_scale``: see
    ``KVQuantSpec.scale_shape``; fp8 scales may be replaced (``dataclasses.replace``) to view the same codes under
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
        want = self.spec.scale_shape(self.num_blocks, self.block_size, self.num_kv_heads)
        for name, scale in (("k_scale", self.k_scale), ("v_scale", self.v_scale)):
            if want is None and scale is not None:
                raise ValueError(f"{self.spec.name} storage has no scales but {name} was given")
            if want is not None and (scale is None or tuple(scale.shape) != want or scale.dtype != SCALE_DTYPE
                                     or not scale.is_contiguous()):
                got = None if scale is None else (tuple(scale.shape), scale.dtype)
                raise ValueError(f"{self.spec.name} storage needs a contiguous {SCALE_DTYPE} {name} of shape "
                                 f"{want}, got {got}")

    @classmethod
    def allocate(
        cls, spec: KVQuantSpec, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
        device: torch.device | str = "cpu",
    ) -> "KVBlocks":
        """Zeroed storage; fp8 scales start at 1.0 until the calibrator sets them."""
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        scale_shape = spec.scale_shape(num_blocks, block_size, num_kv_heads)

        def scale() -> torch.Tensor | None:
            if scale_shape is None:
                return None
            return torch.ones(scale_shape, dtype=SCALE_DTYPE, device=device)

        return cls(
            torch.zeros(shape, dtype=spec.storage_dtype, device=device),
            torch.zeros(shape, dtype=spec.storage_dtype, device=device),
            scale(),
            scale(),
        )

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
        """``((k, k_scale), (v, v_scale))``: K and V are handled identically, one plane at a time."""
        return (self.k, self.k_scale), (self.v, self.v_scale)

    @property
    def nbytes(self) -> int:
        """Every byte this layer's storage holds, scales included."""
        tensors = [self.k, self.v, self.k_scale, self.v_scale]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)
