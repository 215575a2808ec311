"""A prefill step's queries as rows of the CPU's paged attention kernel: every new token one row over the pool.

The K/V of a step's new tokens are stored before attention runs, so the pool holds each query's whole context, and
a causal query at position p is a decode query over its sequence's first p + 1 tokens. Prefill chunks that continue a
cached prefix (N question tails after one observation), and steps that mix them with decoding rows, then read the
pool in place, the shared observation once for all the rows of every sequence on it, instead of padding every
sequence to ``[B, max_query]``, gathering each one's whole cached context out of the pool in every layer and
running a masked attention over the padding. A lone causal sequence with nothing cached stays with torch's fused
attention, and so do bidirectional prefixes (images, pi0's prefix) and tokens the pool does not keep.

Built once per step from the host lists; nothing here reads the pool.
"""

from dataclasses import dataclass

import torch

from oxygen_ros.kernels.cpu_paged_decode import PrefixGroups
from oxygen_ros.kv.cascade import share_groups


@dataclass(frozen=True)
class TokenRows:
    """Row t (the step's t-th new token) reads the first ``lengths[t]`` tokens of the table ``tables[t]``."""

    tables: torch.Tensor  # [T, width] int64
    lengths: torch.Tensor  # [T] int64
    max_length: int
    groups: PrefixGroups


def plan_token_rows(block_tables: torch.Tensor, query_lens: list[int], context_lens: list[int],
                    tables: list[list[int]], block_size: int) -> TokenRows:  # fmt: skip
    """Each sequence's new tokens as rows, and the groups of rows whose leading full blocks are cached and shared:
    sequences that share cached blocks (``share_groups`` over the sequences, each as long as its cached prefix plus
    its first new token), and a sequence alone whose several new tokens share its own cached blocks."""
    device = block_tables.device
    counts = torch.tensor(query_lens, device=device)
    cached = [c - n for c, n in zip(context_lens, query_lens, strict=True)]
    starts = [0]
    for n in query_lens:
        starts.append(starts[-1] + n)
    first = torch.tensor(starts[:-1], device=device).repeat_interleave(counts)
    lengths = torch.tensor(cached, device=device).repeat_interleave(counts) + torch.arange(starts[-1], device=device)
    lengths += 1 - first  # token j of a sequence sees its cached prefix and new tokens 0 .. j
    groups, alone = share_groups(tables, [n + 1 for n in cached], block_size, min_saved_reads=0)
    groups += [([b], cached[b] // block_size) for b in alone if query_lens[b] > 1 and cached[b] >= block_size]
    token_groups = [([t for b in seqs for t in range(starts[b], starts[b + 1])], count) for seqs, count in groups]
    return TokenRows(block_tables.repeat_interleave(counts, dim=0), lengths, max(context_lens),
                     PrefixGroups.of(token_groups, device))  # fmt: skip
