"""The one place a step's context is built and planned: a batch of requests' new tokens (the runner's), the action
tokens of a flow (an action expert's) or pi0's state tokens, each with the read path this pool takes for it, chosen
here once per step from the pool's ``AttentionBackend``: the per-format plan of a mixed pool, the shared-prefix plan of
a CPU decode step (prefix groups for the C kernel, the cascade layout for torch's ops), the token rows of a CPU prefill
the C kernel serves, or none (Triton's paged kernel, torch's attention). Models and layers only read the context.
"""

from typing import TYPE_CHECKING

import torch

from oxygen_ros.kernels.cpu_decode_row import MAX_ROWS
from oxygen_ros.kv.cascade import plan_cascade, plan_prefix_groups
from oxygen_ros.kv.format_plan import FormatPlan
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.kv.token_rows import plan_token_rows

if TYPE_CHECKING:
    from oxygen_ros.kv.kv_cache import KVCache

TOKEN_ROWS_MAX_QUERY = 64  # new tokens per sequence, at most, for a prefill step run as rows of the paged kernel
TOKEN_ROWS_MAX_READS = 1 << 20  # rows x longest context: the kernel's weights buffer (x heads floats) stays small
# an action flow's prefix K/V held for all its denoising steps, every layer at once (pi0.5 in fp32: ~29 MB a sequence
# of 800 prefix tokens); a larger batch gathers each layer's at each step, outside the pool's byte budget either way
ACTION_PREFIX_MAX_BYTES = 64 << 20


def padded_tables(tables: list[list[int]]) -> list[list[int]]:
    """Block tables as rows of one width, padded with block 0 (never read past a row's context)."""
    width = max(len(t) for t in tables)
    return [t + [0] * (width - len(t)) for t in tables]


class StepBuilder:
    def __init__(self, kv: "KVCache") -> None:
        self._kv = kv
        self.block_size = kv.layout.block_size
        self._fills = self._fill_block_sizes()  # the pool's formats and backend are fixed: once, not per step

    def batch(self, tables: list[list[int]], starts: list[int], counts: list[int],
              bidirectional: list[int]) -> tuple[StepContext, torch.Tensor]:  # fmt: skip
        """The context and positions of ``counts[i]`` new tokens of each sequence after its first ``starts[i]``
        (already in the pool), stored in the slots its block table ``tables[i]`` gives; tokens below
        ``bidirectional[i]`` see each other."""
        bs, device = self.block_size, self._kv.device
        slots: list[int] = []
        positions: list[int] = []
        for table, start, n in zip(tables, starts, counts):
            slots.extend(table[pos // bs] * bs + pos % bs for pos in range(start, start + n))
            positions.extend(range(start, start + n))
        padded = padded_tables(tables)
        ctx = StepContext(
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=device),
            query_lens=list(counts),
            context_lens=[start + n for start, n in zip(starts, counts)],
            block_tables=torch.tensor(padded, dtype=torch.long, device=device),
            bidirectional_lens=list(bidirectional) if any(bidirectional) else None,
            tables=padded,
            slots=slots,
        )
        return self.plan(ctx), torch.tensor(positions, dtype=torch.long, device=device)

    def actions(self, block_tables: torch.Tensor, prefix_lens: list[int], horizon: int,
                dtype: torch.dtype) -> StepContext:  # fmt: skip
        """``horizon`` action tokens per sequence after a prefix already in the pool, seeing the whole prefix and
        each other, stored nowhere (slot -1): every denoising step of a flow reads the same context, so each layer's
        prefix K/V is gathered here once, dequantized to ``dtype`` (the expert's), not once per step (up to
        ``ACTION_PREFIX_MAX_BYTES`` of it)."""
        ctx = self.plan(StepContext(
            slot_mapping=torch.full((len(prefix_lens) * horizon,), -1, dtype=torch.int64, device=block_tables.device),
            query_lens=[horizon] * len(prefix_lens),
            context_lens=[p + horizon for p in prefix_lens],
            block_tables=block_tables,
            bidirectional_lens=[p + horizon for p in prefix_lens],
        ))
        layout, lay = ctx.prefill, self._kv.layout  # no token is stored: every row is in one padded layout
        if layout is None or not layout.max_cached:
            return ctx
        held = 2 * lay.num_layers * len(prefix_lens) * layout.max_cached * lay.num_kv_heads * lay.head_dim
        if held * dtype.itemsize <= ACTION_PREFIX_MAX_BYTES:
            ctx.past_kv = [layer.gather(ctx.block_tables, layout.max_cached, dtype, plan=ctx.format_plan,
                                        lens=layout.cached_lens) for layer in self._kv.layers]  # fmt: skip
        return ctx

    def state_tokens(self, block_tables: torch.Tensor, prefix_lens: list[int]) -> StepContext:
        """One new token per sequence at position ``prefix_lens[b]``, stored in its slot, seeing the prefix and
        itself (pi0's state token)."""
        bs, tables = self.block_size, block_tables.tolist()
        slots = [tables[b][p // bs] * bs + p % bs for b, p in enumerate(prefix_lens)]
        ctx = StepContext(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=block_tables.device),
            query_lens=[1] * len(prefix_lens),
            context_lens=[p + 1 for p in prefix_lens],
            block_tables=block_tables,
            tables=tables,
            slots=slots,
        )
        return self.plan(ctx)

    def plan(self, ctx: StepContext) -> StepContext:
        """Add the read path this pool takes for ``ctx`` (see the module docstring), once; ``ctx`` itself."""
        if ctx.planned:
            return ctx
        kv, backend = self._kv, self._kv.backend
        fills = self._fills
        if not kv.pool_layout.mixed and fills[0] is not None:
            ctx.writes = [write.with_fills(fills[0]) for write in ctx.writes]
        if kv.pool_layout.mixed:
            if ctx.decode_rows is not None:
                ctx.merge_decode_rows()
            plan = ctx.format_plan = FormatPlan(kv.units, self.block_size, len(kv.pool_layout.formats),
                                                ctx.slot_mapping, ctx.slots, ctx.block_tables, ctx.tables,
                                                fills)  # fmt: skip
            plan.write_slots()
            plan.segments(ctx.context_lens if ctx.prefill is None else ctx.prefill.cached_lens)
        elif ctx.is_decode and not backend.triton:
            plan_groups = plan_prefix_groups if kv.decodes_in_place else plan_cascade
            groups = plan_groups(ctx.tables, ctx.context_lens, self.block_size, ctx.block_tables.device)
            if kv.decodes_in_place:
                ctx.prefix_groups = groups
            else:
                ctx.cascade = groups
        elif kv.prefills_in_place and not backend.triton and _rows_read_the_pool(ctx):
            ctx.token_rows = plan_token_rows(ctx.block_tables, ctx.query_lens, ctx.context_lens, ctx.tables,
                                             self.block_size)  # fmt: skip
        if ctx.decode_rows is not None and ctx.token_rows is None:
            self.plan(ctx.decode_rows.context)
        # one token each of one to MAX_ROWS sequences, all stored (an action step's slots are -1: never kept)
        ctx.row_decode = (backend.decode_row and ctx.is_decode and ctx.num_seqs <= MAX_ROWS
                          and not kv.pool_layout.mixed and kv.device.type == "cpu" and min(ctx.slots) >= 0)  # fmt: skip
        ctx.planned = True
        return ctx

    def _fill_block_sizes(self) -> list[int | None]:
        """Per format: the block size its writes plan ``BlockFills`` for (int8 keys on the torch path), else None."""
        pl = self._kv.pool_layout
        if self._kv.backend.triton:
            return [None] * len(pl.formats)
        return [self.block_size // pl.units_per_block(fmt)
                if any(lay.layer_spec(i).kind == "int8" for i in range(lay.num_layers)) else None
                for fmt, lay in enumerate(pl.formats)]  # fmt: skip


def _rows_read_the_pool(ctx: StepContext) -> bool:
    """Whether a prefill step's attention can be its tokens as rows over the pool (``kv.token_rows``): causal, every
    new token stored, anything but one fresh causal sequence (that keeps torch's fused causal attention), and short
    chunks (question tails, steps shared with decoding rows): a row's new tokens are read by dot products, and the
    kernel keeps a weight per row and context token, so long chunks stay with torch's attention."""
    fresh = ctx.num_seqs == 1 and ctx.context_lens[0] == ctx.query_lens[0]
    return (ctx.prefill is not None and not fresh and not any(ctx.bidirectional_lens or ())
            and min(ctx.slots) >= 0 and max(ctx.query_lens) <= TOKEN_ROWS_MAX_QUERY
            and len(ctx.slots) * ctx.max_context <= TOKEN_ROWS_MAX_READS)  # fmt: skip
