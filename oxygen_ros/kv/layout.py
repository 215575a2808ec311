"""Shape and storage formats of the KV pool: one format (``KVLayout``) or several sharing one budget (``PoolLayout``).

Storage is counted in units: a unit is one block in the pool's narrowest format, and a block of a format ``s`` times
wider takes ``s`` units.  Everything about bytes (per token, per block, per budget) follows from these two classes.
"""

from dataclasses import dataclass

import torch

from oxygen_ros.kernels import KVQuantSpec


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
    def bytes_per_block(self) -> int:
        """K and V of one block over every layer, int8's scales included."""
        shape = (self.block_size, self.num_kv_heads, self.head_dim)
        return sum(self.layer_spec(i).block_bytes(*shape) for i in range(self.num_layers))

    @property
    def bytes_per_token(self) -> float:
        """K and V of one token over every layer, its share of its block's scales included."""
        return self.bytes_per_block / self.block_size

    def blocks_for_budget(self, budget_bytes: int) -> int:
        return budget_bytes // self.bytes_per_block


@dataclass(frozen=True)
class PoolLayout:
    """The formats one pool holds (format id = index; 0 is the default) and how they share its units."""

    formats: tuple[KVLayout, ...]

    def __post_init__(self) -> None:
        first = self.formats[0]
        geometry = (first.num_layers, first.num_kv_heads, first.head_dim, first.block_size)
        for lay in self.formats:
            if (lay.num_layers, lay.num_kv_heads, lay.head_dim, lay.block_size) != geometry:
                raise ValueError("every format of one pool must share its layers, heads, head_dim and block size")
        if self.mixed and any(lay.full_precision_layers for lay in self.formats):
            raise ValueError("kv_full_precision_layers applies to a single-format pool, not to a mixed-format one")
        if len({lay.name for lay in self.formats}) != len(self.formats):
            raise ValueError(f"duplicate formats in {[lay.name for lay in self.formats]}")
        for fmt in range(len(self.formats)):
            ratios = {self._itemsize(fmt, i) // self.unit_itemsize(i) for i in range(first.num_layers)}
            if len(ratios) != 1 or first.block_size % ratios.pop():
                raise ValueError(f"format {self.formats[fmt].name} does not fit whole units of every layer")

    @classmethod
    def single(cls, layout: KVLayout) -> "PoolLayout":
        return cls((layout,))

    @property
    def layout(self) -> KVLayout:
        """The default format, whose geometry every format shares."""
        return self.formats[0]

    @property
    def mixed(self) -> bool:
        return len(self.formats) > 1

    @property
    def name(self) -> str:
        """E.g. ``fp32`` or, mixed, ``fp32+int8``: part of every prefix-cache key."""
        return "+".join(lay.name for lay in self.formats)

    def _itemsize(self, fmt: int, layer: int) -> int:
        return self.formats[fmt].layer_spec(layer).storage_dtype.itemsize

    def unit_itemsize(self, layer: int) -> int:
        """Bytes per code element of a unit in ``layer``: the narrowest format's."""
        return min(self._itemsize(f, layer) for f in range(len(self.formats)))

    def units_per_block(self, fmt: int) -> int:
        return self._itemsize(fmt, 0) // self.unit_itemsize(0)

    def scaled(self, layer: int) -> bool:
        """Whether ``layer`` needs the int8 scale arenas (keys per unit and channel, values per token)."""
        return any(lay.layer_spec(layer).kind == "int8" for lay in self.formats)

    @property
    def unit_bytes(self) -> int:
        """K and V of one unit over every layer, int8 scales included (what the budget pays per unit)."""
        lay = self.layout
        int8 = KVQuantSpec(torch.int8)
        codes = 2 * lay.block_size * lay.num_kv_heads * lay.head_dim
        return sum(
            int8.block_bytes(lay.block_size, lay.num_kv_heads, lay.head_dim) if self.scaled(i)
            else codes * self.unit_itemsize(i)
            for i in range(lay.num_layers)
        )  # fmt: skip

    def bytes_per_block(self, fmt: int = 0) -> int:
        return self.units_per_block(fmt) * self.unit_bytes

    def units_for_budget(self, budget_bytes: int) -> int:
        return budget_bytes // self.unit_bytes
