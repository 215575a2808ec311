"""The pool's storage: K/V bytes allocated once, one ``LayerKV`` per layer, read and written in each block's format.

A pool holds one format (``KVLayout``: a storage dtype per layer) or several (``PoolLayout``: e.g. observation
prefixes at full precision and per-task decode blocks in int8) under ONE byte budget (``layout.py``).  Storage is
counted in units: a unit is one block in the pool's narrowest format, and a block of a format ``s`` times wider takes
``s`` units, which need not be adjacent (the engine's block pool hands them out).  Per layer, the K and V codes are one byte arena each,
``[num_units, unit bytes]``; every format sees it as its own contiguous ``KVBlocks`` view ``[num_units, block_size /
s, kv_heads, head_dim]``, so the kernels read any format unchanged, a wide block being ``s`` consecutive table
entries of its view.  int8's scales are two more arenas, keys ``[num_units, 1, kv_heads, head_dim]`` (per unit and
channel) and values ``[num_units, block_size, kv_heads]`` (per token), present only when a format is int8 (the units
of wider blocks leave theirs unused); fp8's per-head scales belong to the layer.

In a single-format pool a unit is a block and its id is the block's id: that is the fast path, with no mapping.
"""

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.kernels import (
    Fp8Calibrator,
    KVBlocks,
    cascade_decode_attention,
    copy_blocks,
    gather_kv,
    paged_decode_attention,
    write_kv,
)
from oxygen_ros.kernels.cpu_paged_decode import can_read, cpu_paged_decode
from oxygen_ros.kernels.quant_spec import SCALE_DTYPE, KVQuantSpec
from oxygen_ros.kv.attention_backend import AttentionBackend, choose_backend
from oxygen_ros.kv.block_moves import take
from oxygen_ros.kv.format_plan import FormatPlan
from oxygen_ros.kv.kv_write import KVWrite
from oxygen_ros.kv.layout import KVLayout, PoolLayout
from oxygen_ros.kv.step_builder import StepBuilder
from oxygen_ros.kv.step_context import StepContext


class BlockUnits(Protocol):
    """What a mixed-format pool must know of its blocks; the engine's block pool answers it."""

    def block_units(self, block_id: int) -> tuple[int, list[int]]:
        """A block's format and its units in that format's view, in token order."""
        ...

    def units_of_format(self, fmt: int) -> list[int]:
        """Every unit of the blocks of format ``fmt`` that hold KV (used or cached)."""
        ...


class LayerKV:
    """One layer's storage, a ``KVBlocks`` view per format, and the three operations attention needs.

    Each operation takes the pool's block tables and slots as the engine knows them; ``plan`` (the step context's
    ``format_plan``, None in a single-format pool) maps them to each format's view, and the results are combined: decode merges the
    per-format attentions by their log-sum-exp, gather concatenates the per-format keys (attention does not depend
    on the order of keys: positions are already rotated into them).
    """

    def __init__(self, views: list[KVBlocks], index: int, live_units: Callable[[int], torch.Tensor] | None = None,
                 kernels: str = "torch") -> None:  # fmt: skip
        self.views = views
        self.index = index  # the model layer whose K/V this holds (a step context's per-layer data is indexed by it)
        self.kernels = kernels  # the backend every KV kernel call of this layer runs (AttentionBackend.kernels)
        self.calibrators = {
            fmt: Fp8Calibrator(view.num_kv_heads, device=view.device)
            for fmt, view in enumerate(views)
            if view.spec.kind == "fp8"
        }
        self._live_units = live_units
        self.reads_in_place = len(views) == 1 and can_read(views[0])  # the C decode attention reads this storage

    @property
    def blocks(self) -> KVBlocks:
        """The storage of a single-format pool."""
        if len(self.views) != 1:
            raise RuntimeError("a mixed-format pool layer has one view per format; use views[fmt]")
        return self.views[0]

    def write(self, k: torch.Tensor, v: torch.Tensor, writes: list[KVWrite]) -> None:
        """Store new tokens' K/V [T, KVH, D] as ``writes`` say (quantizing); tokens they do not name are not kept.

        The fp8 calibrator sees only the tokens that are stored: the action expert's K/V (all slots -1, ten denoising
        steps per chunk) would otherwise fill its window with values the pool never holds and move the scales.
        """
        for write in writes:
            view, calibrator = self.views[write.fmt], self.calibrators.get(write.fmt)
            ks, vs = (x if write.rows is None else x.index_select(0, write.rows) for x in (k, v))
            if calibrator is not None:
                live = None if self._live_units is None else (lambda fmt=write.fmt: self._live_units(fmt))
                calibrator.update(view, ks, vs, live_blocks=live)
            write_kv(view, write.slots, ks, vs, all_stored=True, fills=write.fills, backend=self.kernels)

    def gather(
        self, block_tables: torch.Tensor, num_tokens: int, dtype: torch.dtype, plan: FormatPlan | None = None,
        lens: list[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized K/V of the first ``num_tokens`` tokens of each table row: [B, num_tokens, KVH, D] each (in a
        mixed pool: row b's first ``lens[b]`` tokens, grouped by format, then padding)."""
        if plan is None:
            return gather_kv(self.views[0], block_tables, num_tokens, dtype, backend=self.kernels)
        v0 = self.views[0]
        shape = (block_tables.shape[0], num_tokens, v0.num_kv_heads, v0.head_dim)
        keys = torch.zeros(shape, dtype=dtype, device=v0.device)
        values = torch.zeros_like(keys)
        for seg in plan.segments(lens):
            k, v = gather_kv(self.views[seg.fmt], seg.tables, max(seg.lens), dtype, backend=self.kernels)
            for i, (row, n, offset) in enumerate(zip(seg.rows, seg.lens, seg.offsets)):
                keys[row, offset : offset + n] = k[i, :n]
                values[row, offset : offset + n] = v[i, :n]
        return keys, values

    def decode_step(self, q: torch.Tensor, ctx: StepContext, scale: float) -> torch.Tensor:
        """Decode attention of a step's queries [B, H, D] over their contexts, by the path ``StepBuilder.plan`` chose:
        shared-prefix attention in torch ops or the C kernel reading an fp32 or int8 pool in place on a CPU, else the
        paged kernel (per format in a mixed pool)."""
        if ctx.cascade is not None:
            return cascade_decode_attention(q, self.views[0], ctx.cascade, scale, block_mass=ctx.block_mass)
        if ctx.prefix_groups is not None:
            return cpu_paged_decode(q, self.views[0], ctx.block_tables, ctx.context_lens_tensor, ctx.max_context,
                                    scale, groups=ctx.prefix_groups, block_mass=ctx.block_mass)  # fmt: skip
        return self.decode(q, ctx.block_tables, ctx.context_lens_tensor, scale, block_mass=ctx.block_mass,
                           plan=ctx.format_plan, lens=ctx.context_lens)  # fmt: skip

    def prefill_step(self, q: torch.Tensor, ctx: StepContext, scale: float) -> torch.Tensor:
        """Attention of a prefill step's new tokens [T, H, D], each a row over its context in the pool (stored
        before: ``StepBuilder.plan`` chose this path, ``kv.token_rows``)."""
        rows = ctx.token_rows
        assert rows is not None
        return cpu_paged_decode(q, self.views[0], rows.tables, rows.lengths, rows.max_length, scale,
                                groups=rows.groups)  # fmt: skip

    def decode(
        self, q: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
        block_mass: torch.Tensor | None = None, plan: FormatPlan | None = None, lens: list[int] | None = None,
    ) -> torch.Tensor:
        """One query per sequence [B, H, D] over its whole context in the pool (the paged decode kernel); in a mixed
        pool one kernel call per format, merged exactly by log-sum-exp."""
        if plan is None:
            return paged_decode_attention(q, self.views[0], block_tables, context_lens, scale, block_mass=block_mass,
                                          backend=self.kernels)  # fmt: skip
        segments = plan.segments(lens)
        num_seqs, num_heads, _ = q.shape
        lse = torch.full((len(segments), num_seqs, num_heads), float("-inf"), device=q.device)
        out = torch.zeros((len(segments), *q.shape), dtype=torch.float32, device=q.device)
        masses = []
        for i, seg in enumerate(segments):
            rows = seg.rows_tensor
            mass = None if block_mass is None else torch.zeros(len(seg.rows), num_heads, seg.tables.shape[1],
                                                                device=q.device)  # fmt: skip
            part_lse = torch.empty(len(seg.rows), num_heads, device=q.device)
            part = paged_decode_attention(q[rows], self.views[seg.fmt], seg.tables, seg.lens_tensor, scale,
                                          block_mass=mass, lse=part_lse, backend=self.kernels)  # fmt: skip
            out[i, rows], lse[i, rows] = part.float(), part_lse
            masses.append(mass)
        weights = torch.softmax(lse, dim=0)  # each format's share of the softmax mass, per row and head
        if block_mass is not None:  # per-head mass within a format, times that format's share, summed over heads
            for i, (seg, mass) in enumerate(zip(segments, masses)):
                rows = seg.rows_tensor
                credit = (mass * weights[i, rows][:, :, None]).sum(dim=1)
                block_mass.index_put_((rows[:, None].expand_as(seg.entries), seg.entries), credit, accumulate=True)
        return (weights[..., None] * out).sum(dim=0).to(q.dtype)


class KVCache:
    """All layers' storage, allocated once up front so serving never allocates KV memory.

    ``layout``: one format (``KVLayout``) or several (``PoolLayout``); a mixed pool needs ``attach(pool)`` before
    its first step, since only the block pool knows each block's format and units. ``backend``: the paths chosen
    at configure (default: ``EngineConfig``'s, with their environment overrides). ``steps`` builds every step's
    context with the read path this pool takes for it.
    """

    def __init__(self, layout: KVLayout | PoolLayout, num_blocks: int, device: torch.device,
                 backend: AttentionBackend | None = None) -> None:  # fmt: skip
        self.pool_layout = layout if isinstance(layout, PoolLayout) else PoolLayout.single(layout)
        self.layout = self.pool_layout.layout
        self.num_blocks = num_blocks  # units: blocks of the narrowest format
        self.device = device
        self.backend = backend or choose_backend(EngineConfig(), device)
        self.block_pool: BlockUnits | None = None
        self.layers = [self._layer(i) for i in range(self.layout.num_layers)]
        # CPU decode attention: the C kernel where it reads every layer, else shared-prefix torch ops
        self.decodes_in_place = self.backend.c_paged_decode and all(layer.reads_in_place for layer in self.layers)
        # a short prefill chunk's tokens as rows over the pool (kv.token_rows): exact over fp32 storage only (over
        # int8 each token would read its chunk's keys back quantized, under scales set by the chunk's later tokens)
        self.prefills_in_place = self.decodes_in_place and all(layer.views[0].k.dtype == torch.float32
                                                               for layer in self.layers)  # fmt: skip
        self.steps = StepBuilder(self)

    def _layer(self, layer: int) -> LayerKV:
        pl, lay = self.pool_layout, self.layout
        code_bytes = lay.block_size * lay.num_kv_heads * lay.head_dim * pl.unit_itemsize(layer)
        arenas = [torch.zeros(self.num_blocks, code_bytes, dtype=torch.uint8, device=self.device) for _ in "kv"]
        block_scales = None  # int8's, one arena per plane shared by the units of every int8 view
        if pl.scaled(layer):
            int8 = KVQuantSpec(torch.int8)
            shapes = int8.scale_shapes(self.num_blocks, lay.block_size, lay.num_kv_heads, lay.head_dim)
            block_scales = [torch.ones(shape, dtype=dtype, device=self.device)
                            for shape, dtype in zip(shapes, int8.scale_dtypes(), strict=True)]  # fmt: skip
        views = []
        for fmt, fmt_layout in enumerate(pl.formats):
            spec = fmt_layout.layer_spec(layer)
            shape = (self.num_blocks, lay.block_size // pl.units_per_block(fmt), lay.num_kv_heads, lay.head_dim)
            k, v = (arena.view(spec.storage_dtype).view(shape) for arena in arenas)
            scales: list[torch.Tensor] | list[None] = [None, None]
            if spec.kind == "int8":
                scales = block_scales
            elif spec.kind == "fp8":
                scales = [torch.ones(lay.num_kv_heads, dtype=SCALE_DTYPE, device=self.device) for _ in "kv"]
            views.append(KVBlocks(k, v, *scales))
        return LayerKV(views, layer, self._live_units if pl.mixed else None, self.backend.kernels)

    def attach(self, pool: BlockUnits) -> None:
        """Read block formats and units from ``pool`` (the engine's; needed by a mixed pool)."""
        self.block_pool = pool

    def _live_units(self, fmt: int) -> torch.Tensor:
        """Units of blocks of format ``fmt`` that hold KV (in use or cached): what an fp8 rescale must requantize."""
        assert self.block_pool is not None
        return torch.tensor(self.block_pool.units_of_format(fmt), dtype=torch.long, device=self.device)

    @property
    def total_bytes(self) -> int:
        arenas = self.num_blocks * self.pool_layout.unit_bytes
        fp8_scales = sum(
            2 * view.num_kv_heads * SCALE_DTYPE.itemsize
            for layer in self.layers for view in layer.views if view.spec.kind == "fp8"
        )  # fmt: skip
        return arenas + fp8_scales

    def copy_blocks(self, src: list[int], dst: list[int]) -> None:
        """Copy whole blocks (codes and scales) in every layer: copy-on-write of a shared partial block."""
        for fmt, (positions, s_units) in self._by_format(src).items():
            d_units = [u for p in positions for u in self.units(dst[p])[1]]
            s, d = torch.tensor(s_units, device=self.device), torch.tensor(d_units, device=self.device)
            for layer in self.layers:
                copy_blocks(layer.views[fmt], s, layer.views[fmt], d, backend=self.backend.kernels)

    # --- whole blocks, as the memory tiers move them -----------------------------------------------------------
    def _by_format(self, block_ids: list[int]) -> dict[int, tuple[list[int], list[int]]]:
        """{format: (positions in ``block_ids``, their units flattened)}."""
        groups: dict[int, tuple[list[int], list[int]]] = {}
        for position, block_id in enumerate(block_ids):
            fmt, units = self.units(block_id)
            group = groups.setdefault(fmt, ([], []))
            group[0].append(position)
            group[1].extend(units)
        return groups

    def read_blocks(self, block_ids: list[int]) -> list[tuple[list[int], list[KVBlocks], list[int]]]:
        """The blocks as ``block_size``-token blocks, grouped by format: (positions in ``block_ids``, one
        ``KVBlocks`` per layer, indices into them).  A one-unit format is read in place; a wider one is copied out
        (its units are not adjacent) and reshaped."""
        out = []
        for fmt, (positions, units) in self._by_format(block_ids).items():
            width = self.pool_layout.units_per_block(fmt)
            if width == 1:
                out.append((positions, [layer.views[fmt] for layer in self.layers], units))
                continue
            flat = torch.tensor(units, device=self.device)
            layers = [_whole(take(layer.views[fmt], flat, self.device), width) for layer in self.layers]
            out.append((positions, layers, list(range(len(positions)))))
        return out

    def write_blocks(
        self, block_ids: list[int], fill: Callable[[list[KVBlocks], list[int], list[int]], None]
    ) -> None:
        """Have ``fill(layers, indices, positions)`` write the blocks (``block_size``-token blocks of each layer,
        one call per format): a one-unit format in place, a wider one into a buffer then scattered to its units."""
        for fmt, (positions, units) in self._by_format(block_ids).items():
            width = self.pool_layout.units_per_block(fmt)
            if width == 1:
                fill([layer.views[fmt] for layer in self.layers], units, positions)
                continue
            lay = self.pool_layout.formats[fmt]
            buffers = [
                KVBlocks.allocate(lay.layer_spec(i), len(positions), lay.block_size, lay.num_kv_heads, lay.head_dim,
                                  self.device)
                for i in range(lay.num_layers)
            ]  # fmt: skip
            fill(buffers, list(range(len(positions))), positions)
            flat = torch.tensor(units, device=self.device)
            every = torch.arange(len(units), device=self.device)
            for layer, buffer in zip(self.layers, buffers, strict=True):
                copy_blocks(_split(buffer, width), every, layer.views[fmt], flat, backend=self.backend.kernels)

    def units(self, block_id: int) -> tuple[int, list[int]]:
        """A block's format and its units in that format's view, in token order."""
        if not self.pool_layout.mixed:
            return 0, [block_id]
        assert self.block_pool is not None, "a mixed-format KVCache needs attach(pool)"
        return self.block_pool.block_units(block_id)


def _whole(units: KVBlocks, width: int) -> KVBlocks:
    """``width`` consecutive units of a float format as one block each (wide formats have no scales)."""
    n, tokens, heads, dim = units.k.shape
    return replace(units, k=units.k.view(n // width, tokens * width, heads, dim),
                   v=units.v.view(n // width, tokens * width, heads, dim))  # fmt: skip


def _split(blocks: KVBlocks, width: int) -> KVBlocks:
    """Blocks of a float format as ``width`` units each, in token order."""
    n, tokens, heads, dim = blocks.k.shape
    return replace(blocks, k=blocks.k.view(n * width, tokens // width, heads, dim),
                   v=blocks.v.view(n * width, tokens // width, heads, dim))  # fmt: skip
