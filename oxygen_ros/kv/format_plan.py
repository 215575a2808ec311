"""Where one step's tokens live in a mixed-format pool: the engine's block tables and slots, split by format.

The engine addresses KV by block id and slot (``block * block_size + offset``) whatever a block's format; each
format's ``KVBlocks`` view is addressed by unit, with ``block_size / s`` tokens per unit for a format ``s`` units wide.
A ``FormatPlan`` translates once per step (``StepBuilder.plan``; every layer reuses it): per format, the rows that have tokens in it,
their units in table order, how many tokens, and for each unit the table column it came from (to credit attention
mass back to the block).  Only the last block of a row can be partial, so within each format too only the last
unit of a row is partial, and a format's tokens of a row are a plain prefix of its unit list: what the kernels read.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from oxygen_ros.kv.kv_write import KVWrite, stored_tokens

BlockUnitsFn = Callable[[int], tuple[int, list[int]]]  # block id -> (format, its units in token order)


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
    rows_tensor: torch.Tensor = field(init=False)
    lens_tensor: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.rows_tensor = torch.tensor(self.rows, dtype=torch.long, device=self.tables.device)
        self.lens_tensor = torch.tensor(self.lens, dtype=torch.int32, device=self.tables.device)


class FormatPlan:
    """The translation of one step's block tables and slots; each kind of read is computed at most once.

    ``block_tables`` is the host copy of the step's tables (the step context keeps one), so nothing here syncs.
    """

    def __init__(self, units: BlockUnitsFn, block_size: int, num_formats: int, slot_mapping: torch.Tensor,
                 slots: list[int], block_tables: torch.Tensor, tables: list[list[int]],
                 fills: list[int | None] | None = None) -> None:  # fmt: skip
        self.units = units
        self._fills = fills or [None] * num_formats  # per format: plan its writes' BlockFills for this block size
        self.block_size, self.num_formats = block_size, num_formats
        self.slot_mapping, self._slot_list = slot_mapping, slots
        self.block_tables, self._tables = block_tables, tables
        self._segments: dict[tuple[int, ...], list[Segment]] = {}
        self._slots: list[KVWrite] | None = None

    def write_slots(self) -> list[KVWrite]:
        """Per format present: its stored tokens and their slots in its view."""
        if self._slots is None:
            bs, num_formats = self.block_size, self.num_formats
            slots = self._slot_list
            out = [[-1] * len(slots) for _ in range(num_formats)]
            for t, slot in enumerate(slots):
                if slot < 0:
                    continue
                block, offset = divmod(slot, bs)
                fmt, units = self.units(block)
                unit_tokens = bs // len(units)
                out[fmt][t] = units[offset // unit_tokens] * unit_tokens + offset % unit_tokens
            device = self.slot_mapping.device
            writes = (stored_tokens(fmt, fmt_slots, device) for fmt, fmt_slots in enumerate(out))
            self._slots = [w if self._fills[w.fmt] is None else w.with_fills(self._fills[w.fmt])
                           for w in writes if w is not None]  # fmt: skip
        return self._slots

    def segments(self, lens: list[int]) -> list[Segment]:
        """Per format present, the units holding each row's first ``lens[row]`` tokens."""
        key = tuple(lens)
        if key not in self._segments:
            self._segments[key] = self._split(lens)
        return self._segments[key]

    def _split(self, lens: list[int]) -> list[Segment]:
        bs, num_formats = self.block_size, self.num_formats
        # per format: row -> [units, table columns, [tokens]]
        parts: list[dict[int, tuple[list[int], list[int], list[int]]]] = [{} for _ in range(num_formats)]
        for row, (table, n) in enumerate(zip(self._tables, lens)):
            for col in range(-(-n // bs)):
                fmt, units = self.units(table[col])
                tokens = min(bs, n - col * bs)
                used = -(-tokens // (bs // len(units)))
                unit_list, cols, count = parts[fmt].setdefault(row, ([], [], [0]))
                unit_list += units[:used]
                cols += [col] * used
                count[0] += tokens
        device = self.block_tables.device
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
