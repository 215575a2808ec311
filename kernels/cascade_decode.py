"""``cascade_decode_attention``: paged decode attention that reads blocks shared by several rows once (CPU path).

The paged decode kernel gives each row its own pass over its blocks, which on a GPU reads them in place; in torch
every row's context is gathered out of the pool in every layer, and with eight tasks asking about one 544-token
observation that copy is most of a decode step.  Here a ``SharedPrefix`` (rows that start with the same blocks) is
attended with one matrix product per kv-head over the shared keys, read once and, for a run of consecutive block ids
in a float format, not copied at all; then every such row attends to its own remaining blocks (its suffix), and the
two partial attentions merge exactly by their log-sum-exp.  A row that shares nothing (``LoneRow``: batch 1) is one
softmax over its whole context, read in place when its blocks are a run.  All math is fp32, as in the kernel.

For single-format pools only: padding entries and bytes past a context are read and then masked, which needs every
stored code to be finite (true of every format's writes; a mixed pool's bytes may be another format's).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .blocks import gather_kv_torch
from .quant import dequantize
from .quant_spec import KVBlocks


@dataclass(frozen=True)
class SharedPrefix:
    """The first ``num_blocks`` blocks of ``rows`` (positions among the grouped rows; None = all of them, in order):
    block ids, or a slice of consecutive ids (read as a view)."""

    rows: torch.Tensor | None
    blocks: torch.Tensor | slice
    num_blocks: int


@dataclass(frozen=True)
class LoneRow:
    """A row that shares no block with another: its whole context, ``length`` tokens in ``num_blocks`` blocks (ids,
    or a slice when they are consecutive), attended to in one softmax."""

    row: int
    blocks: torch.Tensor | slice
    num_blocks: int
    length: int


@dataclass(frozen=True)
class CascadeLayout:
    """Where a decode step's rows read: groups of rows sharing leading blocks (``shared``, then each grouped row's
    own ``suffix_*``, one row per grouped row), and rows alone (``lone``)."""

    grouped_rows: torch.Tensor | None  # batch rows that are in a group, ascending; None = every row
    shared: list[SharedPrefix]
    suffix_tables: torch.Tensor | None  # [R, S] a grouped row's blocks after its group's, padded with a valid id
    suffix_visible: torch.Tensor | None  # [R, max suffix] bool: the tokens of the suffix (a prefix of each row)
    suffix_columns: torch.Tensor | None  # [R, S] the block-table column of each suffix entry (block mass goes there)
    lone: list[LoneRow]


def cascade_decode_attention(
    q: torch.Tensor, blocks: KVBlocks, layout: CascadeLayout, sm_scale: float, *,
    block_mass: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of ``q`` ``[B, H, d]`` over each row's context as ``layout`` describes it; returns ``[B, H, d]`` in
    q's dtype.

    ``block_mass`` (fp32 ``[B, max_blocks]``, summed over heads) gains each block's softmax mass, as in
    ``paged_decode_attention``: a shared prefix's and a lone row's blocks are the table's first columns, a suffix
    entry's column is given (padding entries repeat a column and add 0).

    A row's numerics depend only on which rows share its blocks (its group), never on where the blocks sit.
    """
    num_seqs, num_heads, head_dim = q.shape
    kv_heads = blocks.num_kv_heads
    qf = q.float().view(num_seqs, kv_heads, num_heads // kv_heads, head_dim)
    grouped = layout.grouped_rows
    if grouped is None and not layout.lone:
        out = _grouped(qf, blocks, layout, sm_scale, block_mass)
    else:
        out = torch.empty_like(qf)
        if layout.shared:
            rows_mass = None if block_mass is None else torch.zeros(len(grouped), block_mass.shape[1],
                                                                       device=q.device)  # fmt: skip
            out[grouped] = _grouped(qf[grouped], blocks, layout, sm_scale, rows_mass)
            if block_mass is not None:
                block_mass.index_add_(0, grouped, rows_mass)
        for lone in layout.lone:
            out[lone.row] = _alone(qf[lone.row], blocks, lone, sm_scale, block_mass)
    return out.reshape(num_seqs, num_heads, head_dim).to(q.dtype)


def _alone(q: torch.Tensor, blocks: KVBlocks, lone: LoneRow, sm_scale: float,
           block_mass: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
    """One row's attention over its whole context: q [kvh, g, d] -> [kvh, g, d]."""
    k, v = (x[: lone.length] for x in _read(blocks, lone.blocks))  # [L, kvh, d]
    probs = torch.softmax(torch.matmul(q, k.permute(1, 2, 0)) * sm_scale, dim=-1)  # [kvh, g, L]
    if block_mass is not None:
        per_token = F.pad(probs.sum(dim=(0, 1)), (0, lone.num_blocks * blocks.block_size - lone.length))
        block_mass[lone.row, : lone.num_blocks] += per_token.view(lone.num_blocks, blocks.block_size).sum(-1)
    return torch.matmul(probs, v.permute(1, 0, 2))


def _grouped(qf: torch.Tensor, blocks: KVBlocks, layout: CascadeLayout, sm_scale: float,
             block_mass: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
    """The grouped rows: q [R, kvh, g, d] -> [R, kvh, g, d]; ``block_mass`` [R, max_blocks] if given."""
    num_rows, kv_heads, group, head_dim = qf.shape
    block_size = blocks.block_size
    max_suffix = layout.suffix_visible.shape[1]
    keys, values = gather_kv_torch(blocks, layout.suffix_tables, max_suffix)  # [R, L, kvh, d]
    scores = torch.matmul(qf, keys.permute(0, 2, 3, 1)) * sm_scale  # [R, kvh, g, L]
    scores.masked_fill_(~layout.suffix_visible[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [R, kvh, g]
    probs = torch.exp(scores - lse[..., None])
    out = torch.matmul(probs, values.permute(0, 2, 1, 3))  # [R, kvh, g, d]
    suffix_weight = torch.ones_like(lse) if block_mass is not None else None

    for prefix in layout.shared:
        rows = prefix.rows
        k_s, v_s = _read(blocks, prefix.blocks)  # [n_tokens, kvh, d]
        q_rows = qf if rows is None else qf[rows]
        n = q_rows.shape[0]
        q_g = q_rows.permute(1, 0, 2, 3).reshape(kv_heads, n * group, head_dim)
        s_scores = torch.bmm(q_g, k_s.permute(1, 2, 0)) * sm_scale  # [kvh, n*g, n_tokens]
        s_lse = torch.logsumexp(s_scores, dim=-1)
        s_probs = torch.exp(s_scores - s_lse[..., None])
        s_out = torch.bmm(s_probs, v_s.permute(1, 0, 2)).view(kv_heads, n, group, head_dim).permute(1, 0, 2, 3)
        s_lse = s_lse.view(kv_heads, n, group).permute(1, 0, 2)  # [n, kvh, g]
        t_lse, t_out = (lse, out) if rows is None else (lse[rows], out[rows])
        total = torch.logaddexp(s_lse, t_lse)
        w_shared, w_suffix = torch.exp(s_lse - total), torch.exp(t_lse - total)
        merged = s_out * w_shared[..., None] + t_out * w_suffix[..., None]
        if rows is None:
            out = merged
        else:
            out[rows] = merged
        if block_mass is not None:
            if rows is None:
                suffix_weight = w_suffix
            else:
                suffix_weight[rows] = w_suffix
            mass = (s_probs * w_shared.permute(1, 0, 2).reshape(kv_heads, n * group, 1))
            mass = mass.view(kv_heads, n, group, prefix.num_blocks, block_size).sum(dim=(0, 2, 4))  # [n, blocks]
            if rows is None:
                block_mass[:, : prefix.num_blocks] += mass
            else:
                block_mass[rows, : prefix.num_blocks] += mass

    if block_mass is not None:
        per_token = (probs * suffix_weight[..., None]).sum(dim=(1, 2))  # [R, L]
        width = layout.suffix_tables.shape[1]
        per_block = F.pad(per_token, (0, width * block_size - max_suffix)).view(num_rows, width, block_size).sum(-1)
        block_mass.scatter_add_(1, layout.suffix_columns, per_block)
    return out


def _read(blocks: KVBlocks, ids: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
    """Dequantized K and V of whole blocks as ``[n_blocks * block_size, kvh, d]`` fp32 (a view for a slice of an
    fp32 pool)."""
    k, v = (
        dequantize(data[ids], None if scale is None else scale if scale.dim() == 1 else scale[ids]).flatten(0, 1)
        for data, scale in blocks.planes
    )
    return k, v
