"""Which blocks of a decode step several rows read: the plan of the CPU's shared-prefix (cascade) attention.

When several tasks ask about one observation, their block tables start with the same blocks.  A GPU kernel reads
blocks in place and extra rows cost almost nothing; on a CPU, reading each row's whole context is what a decode step
costs.  So rows are grouped by the longest run of leading full blocks they share with other rows (a prefix tree over
the tables), a group's blocks are read once for all its rows (one matrix product per kv-head), then each row's own
tail; the two attentions merge exactly by their
log-sum-exp (``kernels.cascade_decode_attention``).  A lone row is a group of one: its full blocks but the newest
token's.  A run of consecutive block ids is read as a view of the pool, without a copy (at batch 1, most of the
context when the pool handed its blocks out in order).

How a row's attention is split depends only on which rows share its blocks, never on where the blocks sit in the
pool, so a request restored from a memory tier into other blocks gets bit-identical attention.

Built once per step from the host copy of the tables; nothing here reads the pool.
"""

from dataclasses import dataclass

import torch

from oxygen_ros.kernels import SharedPrefix


@dataclass
class CascadePlan:
    shared: list[SharedPrefix]  # groups whose leading blocks are read once
    suffix_tables: torch.Tensor  # [B, S] each row's blocks after its group's shared ones, padded with a valid id
    suffix_columns: torch.Tensor  # [B, S] the block-table column of each suffix entry (block mass goes there)
    suffix_lens: list[int]  # tokens in each row's suffix (>= 1: the new token is always in it)
    suffix_visible: torch.Tensor  # [B, max(suffix_lens)] bool: which suffix entries' tokens a row attends to


def plan_cascade(tables: list[list[int]], context_lens: list[int], block_size: int,
                 device: torch.device) -> CascadePlan:  # fmt: skip
    """Group the rows of a decode step (see the module docstring)."""
    num_rows = len(tables)
    # full blocks before the one holding each row's newest token: what may be read as a shared prefix
    limits = [(n - 1) // block_size for n in context_lens]
    groups: list[tuple[list[int], int]] = []  # (rows, blocks they share)

    def split(rows: list[int], depth: int) -> None:
        """``rows`` share their first ``depth`` blocks; rows that share more go deeper, the rest end here."""
        by_next: dict[int, list[int]] = {}
        for r in rows:
            if limits[r] > depth:
                by_next.setdefault(tables[r][depth], []).append(r)
        deeper = [part for part in by_next.values() if len(part) > 1]
        for part in deeper:
            split(part, depth + 1)
        ending = sorted(set(rows).difference(r for part in deeper for r in part))
        if depth and len(ending) > 1:
            groups.append((ending, depth))
        else:
            for r in ending:  # alone: all its full blocks but the newest token's, as a group of one
                if limits[r]:
                    groups.append(([r], limits[r]))

    split(list(range(num_rows)), 0)
    shared_blocks = [0] * num_rows
    shared: list[SharedPrefix] = []
    for rows, count in groups:
        ids = tables[rows[0]][:count]
        consecutive = ids == list(range(ids[0], ids[0] + count))
        blocks: torch.Tensor | slice = slice(ids[0], ids[0] + count) if consecutive else torch.tensor(ids, device=device)
        row_index = None if len(rows) == num_rows else torch.tensor(rows, device=device)
        shared.append(SharedPrefix(row_index, blocks, count))
        for r in rows:
            shared_blocks[r] = count
    suffix_lens = [n - shared_blocks[r] * block_size for r, n in enumerate(context_lens)]
    width = max(-(-n // block_size) for n in suffix_lens)
    suffix_tables, suffix_columns = [], []
    for r, table in enumerate(tables):
        start, count = shared_blocks[r], -(-suffix_lens[r] // block_size)
        columns = list(range(start, start + count))
        columns += [columns[-1]] * (width - count)  # padding repeats the last entry: read, masked, mass 0
        suffix_columns.append(columns)
        suffix_tables.append([table[c] for c in columns])
    return CascadePlan(
        shared,
        torch.tensor(suffix_tables, dtype=torch.long, device=device),
        torch.tensor(suffix_columns, dtype=torch.long, device=device),
        suffix_lens,
        torch.arange(max(suffix_lens), device=device)[None, :] < torch.tensor(suffix_lens, device=device)[:, None],
    )
