"""Where one step's tokens live in a mixed-format pool: the engine's block tables and slots, split by format.

The engine addresses KV by block id and slot (``block * block_size + offset``) whatever a block's format; each
format's ``KVBlocks`` view is addressed by unit, with ``block_size / s`` tokens per unit for a format ``s`` units wide.
A ``StepPlan`` translates once per forward pass (every layer reuses it): per format, the rows that have tokens in it,
their units in table order, how many tokens, and for each unit the table column it came from (to credit attention
mass back to the block).  Only the last block of a row can be partial, so within each format too only the last
unit of a row is partial, and a format's tokens of a row are a plain prefix of its unit list: what the kernels read.
"""

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from oxygen_ros.engine.kv_cache import KVCache
    from oxygen_ros.layers.attention import AttentionMetadata


@dataclass
class Segment:
    """One format's share of a batch: ``rows[i]`` has ``lens[i]`` tokens in units ``tables[i]``; gathered keys of the
    row go at ``offsets[i]`` (after the row's tokens of lower format ids)."""

    fmt: int
    rows: list[int]
    lens: list[int]
    offsets: list[int]
    tables: torch.Tensor  # [n, max units] unit ids, padded with unit 0 (never read)
    entries: torch.Tensor  # [n, max units] block-table column of each unit

    @cached_property
    def rows_tensor(self) -> torch.Tensor:
        return torch.tensor(self.rows, dtype=torch.long, device=self.tables.device)

    @cached_property
    def lens_tensor(self) -> torch.Tensor:
        return torch.tensor(self.lens, dtype=torch.int32, device=self.tables.device)


class StepPlan:
    """The translation of one ``AttentionMetadata``; computed lazily, at most once per kind of read."""

    def __init__(self, kv: "KVCache", meta: "AttentionMetadata") -> None:
        self.kv = kv
        self.meta = meta
        self._tables = meta.block_tables.tolist()
        self._segments: dict[tuple[int, ...], list[Segment]] = {}
        self._slots: list[tuple[int, torch.Tensor]] | None = None

    def write_slots(self) -> list[tuple[int, torch.Tensor]]:
        """Per format present: the slot mapping into its view (-1 for tokens of other formats or not stored)."""
        if self._slots is None:
            bs, num_formats = self.kv.layout.block_size, len(self.kv.pool_layout.formats)
            slots = self.meta.slot_mapping.tolist()
            out = [[-1] * len(slots) for _ in range(num_formats)]
            for t, slot in enumerate(slots):
                if slot < 0:
                    continue
                block, offset = divmod(slot, bs)
                fmt, units = self.kv.units(block)
                unit_tokens = bs // len(units)
                out[fmt][t] = units[offset // unit_tokens] * unit_tokens + offset % unit_tokens
            device = self.meta.slot_mapping.device
            self._slots = [
                (fmt, torch.tensor(fmt_slots, dtype=torch.long, device=device))
                for fmt, fmt_slots in enumerate(out)
                if any(s >= 0 for s in fmt_slots)
            ] or [(0, self.meta.slot_mapping)]
        return self._slots

    def segments(self, lens: list[int]) -> list[Segment]:
        """Per format present, the units holding each row's first ``lens[row]`` tokens."""
        key = tuple(lens)
        if key not in self._segments:
            self._segments[key] = self._split(lens)
        return self._segments[key]

    def _split(self, lens: list[int]) -> list[Segment]:
        bs, num_formats = self.kv.layout.block_size, len(self.kv.pool_layout.formats)
        # per format: row -> [units, table columns, [tokens]]
        parts: list[dict[int, tuple[list[int], list[int], list[int]]]] = [{} for _ in range(num_formats)]
        for row, (table, n) in enumerate(zip(self._tables, lens)):
            for col in range(-(-n // bs)):
                fmt, units = self.kv.units(table[col])
                tokens = min(bs, n - col * bs)
                used = -(-tokens // (bs // len(units)))
                unit_list, cols, count = parts[fmt].setdefault(row, ([], [], [0]))
                unit_list += units[:used]
                cols += [col] * used
                count[0] += tokens
        device = self.meta.block_tables.device
        offsets = [0] * len(lens)
        segments = []
        for fmt, by_row in enumerate(parts):
            if not by_row:
                continue
            rows = sorted(by_row)
            width = max(len(by_row[r][0]) for r in rows)
            tables = torch.zeros(len(rows), width, dtype=torch.long)
            entries = torch.zeros(len(rows), width, dtype=torch.long)
            for i, r in enumerate(rows):
                units, cols, _ = by_row[r]
                tables[i, : len(units)] = torch.tensor(units)
                entries[i, : len(cols)] = torch.tensor(cols)
            seg_lens = [by_row[r][2][0] for r in rows]
            segments.append(Segment(fmt, rows, seg_lens, [offsets[r] for r in rows], tables.to(device),
                                    entries.to(device)))  # fmt: skip
            for r, n in zip(rows, seg_lens):
                offsets[r] += n
        return segments


class StepPlanner:
    """Hands every layer of a step the same ``StepPlan`` (kept on the step's metadata)."""

    def __init__(self, kv: "KVCache") -> None:
        self.kv = kv

    def for_step(self, meta: "AttentionMetadata") -> StepPlan:
        if meta.kv_plan is None:
            meta.kv_plan = StepPlan(self.kv, meta)
        return meta.kv_plan
