"""``cascade_decode_attention``: paged decode attention that reads blocks shared by several rows once (CPU path).

The paged decode kernel gives each row its own pass over its blocks, which on a GPU reads them in place; in torch
every row's context is gathered out of the pool in every layer, and with eight tasks asking about one 544-token
observation that copy is most of a decode step.  Here a ``SharedPrefix`` (rows that start with the same blocks) is
attended with one matrix product per kv-head over the shared keys, read once and, for a run of consecutive block ids
in a float format, not copied at all; then every row attends to its own remaining blocks (its suffix), and the two
partial attentions merge exactly by their log-sum-exp.  All math is fp32, as in the kernel.

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
    """The first ``num_blocks`` blocks of ``rows`` (None = every row, in order): block ids, or a slice of
    consecutive ids (read as a view)."""

    rows: torch.Tensor | None
    blocks: torch.Tensor | slice
    num_blocks: int


def cascade_decode_attention(
    q: torch.Tensor, blocks: KVBlocks, shared: list[SharedPrefix], suffix_tables: torch.Tensor,
    suffix_visible: torch.Tensor, sm_scale: float, *, block_mass: torch.Tensor | None = None,
    suffix_columns: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of ``q`` ``[B, H, d]`` over, per row, its shared prefix (if any group lists it) followed by the
    tokens of ``suffix_tables[b]`` that ``suffix_visible[b]`` (bool ``[B, max_suffix]``, a prefix of each row: its
    suffix length) marks; returns ``[B, H, d]`` in q's dtype.

    ``block_mass`` (fp32 ``[B, max_blocks]``, summed over heads) gains each block's softmax mass, as in
    ``paged_decode_attention``: a shared prefix's blocks are the table's first columns, a suffix entry's column is
    ``suffix_columns[b, j]`` (padding entries repeat a column and add 0).
    """
    num_seqs, num_heads, head_dim = q.shape
    kv_heads, block_size = blocks.num_kv_heads, blocks.block_size
    group = num_heads // kv_heads
    qf = q.float().view(num_seqs, kv_heads, group, head_dim)

    max_suffix = suffix_visible.shape[1]
    keys, values = gather_kv_torch(blocks, suffix_tables, max_suffix)  # [B, L, kvh, d]
    scores = torch.matmul(qf, keys.permute(0, 2, 3, 1)) * sm_scale  # [B, kvh, g, L]
    scores.masked_fill_(~suffix_visible[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [B, kvh, g]
    probs = torch.exp(scores - lse[..., None])
    out = torch.matmul(probs, values.permute(0, 2, 1, 3))  # [B, kvh, g, d]
    suffix_weight = torch.ones_like(lse) if block_mass is not None else None

    for prefix in shared:
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
        per_token = (probs * suffix_weight[..., None]).sum(dim=(1, 2))  # [B, L]
        width = suffix_tables.shape[1]
        per_block = F.pad(per_token, (0, width * block_size - max_suffix)).view(num_seqs, width, block_size).sum(-1)
        block_mass.scatter_add_(1, suffix_columns, per_block)
    return out.reshape(num_seqs, num_heads, head_dim).to(q.dtype)


def _read(blocks: KVBlocks, ids: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
    """Dequantized K and V of whole blocks as ``[n_blocks * block_size, kvh, d]`` fp32 (a view for a slice of an
    fp32 pool)."""
    k, v = (
        dequantize(data[ids], None if scale is None else scale if scale.dim() == 1 else scale[ids]).flatten(0, 1)
        for data, scale in blocks.planes
    )
    return k, v
