"""Which blocks of a decode step several rows read: the plan of the CPU's shared-prefix (cascade) attention.

When several tasks ask about one observation, their block tables start with the same blocks.  A GPU kernel reads
blocks in place and extra rows cost almost nothing; on a CPU, reading each row's whole context is what a decode step
costs.  So rows are grouped by the longest run of leading full blocks they share with other rows (a prefix tree over
the tables), a group's blocks are read once for all its rows (one matrix product per kv-head), then each row's own
tail; the two attentions merge exactly by their log-sum-exp (``kernels.cascade_decode_attention``).  A row that
shares no block is attended to alone, in one softmax over its whole context.  A run of consecutive block ids is read as a view of the pool, without a copy (at
batch 1, the whole context when the pool handed its blocks out in order).

How a row's attention is split depends only on which rows share its blocks, never on where the blocks sit in the
pool, so a request restored from a memory tier into other blocks gets bit-identical attention.

Built once per step from the host copy of the tables; nothing here reads the pool.
"""

import torch

from oxygen_ros.kernels import CascadeLayout, LoneRow, SharedPrefix
from oxygen_ros.kernels.cpu_paged_decode import PrefixGroups

# A group of rows costs a fused attention call and a merge per layer, about what reading this many blocks once per
# row costs; rows sharing fewer blocks beyond their parent group stay in it and read those blocks as their own.
MIN_SAVED_BLOCK_READS = 32
# The C kernel attends a group's prefix as matrix products over its K transposed per layer (kernels/cpu/
# shared_prefix.h); for fewer rows than this, reading the shared blocks once per row costs less (SmolLM2's 3 kv heads
# of 64, 2 threads: 2-8 rows 1.3-2x faster row by row, 12-16 about even, 32 rows 1.15x faster as one group).
MIN_GROUP_ROWS_IN_PLACE = 16


def share_groups(tables: list[list[int]], context_lens: list[int], block_size: int,
                 min_saved_reads: int = MIN_SAVED_BLOCK_READS,
                 min_rows: int = 2) -> tuple[list[tuple[list[int], int]], list[int]]:  # fmt: skip
    """(groups: rows and the leading blocks they share, rows alone) of a decode step (see the module docstring); a
    group that would save fewer than ``min_saved_reads`` block reads, or hold fewer than ``min_rows`` rows, is not
    formed: its rows stay with the rows that share fewer blocks with them (alone, at the root)."""
    num_rows = len(tables)
    # full blocks before the one holding each row's newest token: what may be read as a shared prefix
    limits = [(n - 1) // block_size for n in context_lens]
    groups: list[tuple[list[int], int]] = []  # (rows, blocks they share)

    def split(rows: list[int], depth: int) -> list[int]:
        """``rows`` share their first ``depth`` blocks; rows that share more go deeper, the rest end here. Rows that
        would save too few reads deeper stay with the rows ending here. Returns the rows left without a group: the
        level above takes them in (at the root they are alone)."""
        by_next: dict[int, list[int]] = {}
        for r in rows:
            if limits[r] > depth:
                by_next.setdefault(tables[r][depth], []).append(r)
        parts = [part for part in by_next.values() if len(part) > 1]
        ending = sorted(set(rows).difference(r for part in parts for r in part))
        for part in parts:
            groups_before = len(groups)
            left = split(part, depth + 1)
            if (ending or not depth) and _saved_reads(groups[groups_before:], depth) < min_saved_reads:
                del groups[groups_before:]
                left = part
            ending = sorted(ending + left)
        if depth and len(ending) >= max(2, min_rows):
            groups.append((ending, depth))
            return []
        return ending

    alone = split(list(range(num_rows)), 0)
    return groups, alone


def plan_cascade(tables: list[list[int]], context_lens: list[int], block_size: int, device: torch.device,
                 min_saved_reads: int = MIN_SAVED_BLOCK_READS) -> CascadeLayout:  # fmt: skip
    """The torch path's plan: ``share_groups`` as the tensors ``cascade_decode_attention`` reads."""
    groups, alone = share_groups(tables, context_lens, block_size, min_saved_reads)
    lone = []
    for r in sorted(alone):
        count = -(-context_lens[r] // block_size)
        lone.append(LoneRow(r, _blocks(tables[r][:count], device), count, context_lens[r]))
    if not groups:
        return CascadeLayout(None, [], None, None, None, lone)
    grouped = sorted(r for rows, _ in groups for r in rows)
    position = {r: i for i, r in enumerate(grouped)}
    shared_blocks = {}
    shared = []
    for rows, count in groups:
        index = None if len(rows) == len(grouped) else torch.tensor([position[r] for r in rows], device=device)
        shared.append(SharedPrefix(index, _blocks(tables[rows[0]][:count], device), count))
        shared_blocks.update(dict.fromkeys(rows, count))
    suffix_lens = [context_lens[r] - shared_blocks[r] * block_size for r in grouped]
    width = max(-(-n // block_size) for n in suffix_lens)
    suffix_tables, suffix_columns = [], []
    for r, n in zip(grouped, suffix_lens):
        start, count = shared_blocks[r], -(-n // block_size)
        columns = list(range(start, start + count))
        columns += [columns[-1]] * (width - count)  # padding repeats the last entry: read, masked, mass 0
        suffix_columns.append(columns)
        suffix_tables.append([tables[r][c] for c in columns])
    lens = torch.tensor(suffix_lens, device=device)
    return CascadeLayout(
        None if len(grouped) == len(tables) else torch.tensor(grouped, device=device),
        shared,
        torch.tensor(suffix_tables, dtype=torch.long, device=device),
        torch.where(torch.arange(max(suffix_lens), device=device)[None, :] < lens[:, None], 0.0,
                    float("-inf"))[:, None, None, :],
        torch.tensor(suffix_columns, dtype=torch.long, device=device),
        lone,
    )


def plan_prefix_groups(tables: list[list[int]], context_lens: list[int], block_size: int, device: torch.device,
                       min_saved_reads: int = MIN_SAVED_BLOCK_READS,
                       min_rows: int = MIN_GROUP_ROWS_IN_PLACE) -> PrefixGroups:  # fmt: skip
    """The C kernel's plan: ``share_groups`` of at least ``min_rows`` rows as flat int64 tensors (rows alone are in no
    group)."""
    groups, _ = share_groups(tables, context_lens, block_size, min_saved_reads, min_rows)
    return PrefixGroups.of(groups, device)


def _saved_reads(groups: list[tuple[list[int], int]], depth: int) -> int:
    """Block reads that ``groups`` (all deeper than ``depth``) save over reading their blocks past ``depth`` once
    per row."""
    return sum((len(rows) - 1) * (count - depth) for rows, count in groups)


def _blocks(ids: list[int], device: torch.device) -> torch.Tensor | slice:
    """A run of consecutive ids as a slice (read as a view of the pool), other ids as an index."""
    if ids == list(range(ids[0], ids[0] + len(ids))):
        return slice(ids[0], ids[0] + len(ids))
    return torch.tensor(ids, device=device)
