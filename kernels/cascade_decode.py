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
from .quant import dequantize, take_rows
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
    suffix_bias: torch.Tensor | None  # [R, 1, 1, max suffix] fp32: 0 on the tokens of each row's suffix, -inf after
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
    entry's column is given (padding entries repeat a column and add 0).  The mass is computed beside the output,
    never into it, so measuring it or not leaves the attention bit for bit the same.

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
    """One row's attention over its whole context: q [kvh, g, d] -> [kvh, g, d] (each kv-head's g query heads are
    its queries: one fused attention call, no GQA expansion)."""
    k, v = (x[: lone.length].permute(1, 0, 2) for x in _read(blocks, lone.blocks))  # [kvh, L, d]
    out = F.scaled_dot_product_attention(q[None], k[None], v[None], scale=sm_scale)[0]
    if block_mass is not None:
        probs = torch.softmax(torch.matmul(q, k.transpose(1, 2)) * sm_scale, dim=-1)  # [kvh, g, L]
        per_token = F.pad(probs.sum(dim=(0, 1)), (0, lone.num_blocks * blocks.block_size - lone.length))
        block_mass[lone.row, : lone.num_blocks] += per_token.view(lone.num_blocks, blocks.block_size).sum(-1)
    return out


def _grouped(qf: torch.Tensor, blocks: KVBlocks, layout: CascadeLayout, sm_scale: float,
             block_mass: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
    """The grouped rows: q [R, kvh, g, d] -> [R, kvh, g, d]; ``block_mass`` [R, max_blocks] if given.

    Each part is one fused attention call that also returns its log-sum-exp: every row's own suffix (padding masked
    by ``suffix_bias``), then each shared prefix with the queries of all its rows at once; a prefix's share of a
    row's softmax mass is sigmoid(lse_prefix - lse_suffix), so the merge is one lerp."""
    num_rows, kv_heads, group, head_dim = qf.shape
    keys, values = gather_kv_torch(blocks, layout.suffix_tables, layout.suffix_bias.shape[-1])  # [R, L, kvh, d]
    keys, values = keys.transpose(1, 2), values.transpose(1, 2)  # [R, kvh, L, d]
    out, lse = _attention_with_lse(qf, keys, values, layout.suffix_bias, sm_scale)  # [R, kvh, g, d], [R, kvh, g]
    prefix_parts = []
    for prefix in layout.shared:
        rows = prefix.rows
        k_s, v_s = (x.permute(1, 0, 2)[None] for x in _read(blocks, prefix.blocks))  # [1, kvh, n_tokens, d]
        q_rows = qf if rows is None else qf[rows]
        n = q_rows.shape[0]
        q_g = q_rows.permute(1, 0, 2, 3).reshape(1, kv_heads, n * group, head_dim)
        s_out, s_lse = _attention_with_lse(q_g, k_s, v_s, None, sm_scale)
        s_out = s_out[0].view(kv_heads, n, group, head_dim).permute(1, 0, 2, 3)
        s_lse = s_lse[0].view(kv_heads, n, group).permute(1, 0, 2)  # [n, kvh, g]
        t_lse, t_out = (lse, out) if rows is None else (lse[rows], out[rows])
        merged = torch.lerp(t_out, s_out, torch.sigmoid(s_lse - t_lse)[..., None])
        row_lse = torch.logaddexp(s_lse, t_lse) if block_mass is not None else None
        if rows is None:
            out = merged
        else:
            out[rows] = merged
        prefix_parts.append((prefix, q_g, k_s, row_lse))
    if block_mass is not None:
        _grouped_mass(qf, keys, layout, prefix_parts, lse, sm_scale, blocks.block_size, block_mass)
    return out


def _attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                        sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """softmax(q k^T * scale + bias) v and its log-sum-exp, [B, h, Lq, d] -> ([B, h, Lq, d], [B, h, Lq]): on CPU
    torch's fused attention, which returns the log-sum-exp the merge needs (the public SDPA does not); it has no
    CUDA kernel, so elsewhere the same math in fp32 matrix products (a decode step's few query rows)."""
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=bias, scale=sm_scale)
    return attention_with_lse_products(q, k, v, bias, sm_scale)


def attention_with_lse_products(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                                sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``_attention_with_lse`` off CPU: plain fp32 matrix products, any device. A row whose bias masks every key
    would give NaN here (0 from the fused CPU op); the cascade plan leaves every row at least one suffix token."""
    scores = torch.matmul(q.float(), k.float().transpose(-2, -1)) * sm_scale
    if bias is not None:
        scores = scores + bias
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse[..., None]), v.float()).to(q.dtype), lse


def _grouped_mass(qf: torch.Tensor, keys: torch.Tensor, layout: CascadeLayout, prefix_parts: list, suffix_lse:
                  torch.Tensor, sm_scale: float, block_size: int, block_mass: torch.Tensor) -> None:  # fmt: skip
    """Each block's share of every grouped row's softmax (summed over heads) added to ``block_mass`` [R, blocks]:
    the scores again, against each row's final log-sum-exp (suffix and its prefix merged)."""
    num_rows, kv_heads, group, _ = qf.shape
    final_lse = suffix_lse.clone()
    for prefix, q_g, k_s, row_lse in prefix_parts:
        rows = prefix.rows
        if rows is None:
            final_lse = row_lse
        else:
            final_lse[rows] = row_lse
        n = q_g.shape[2] // group
        lse_g = row_lse.permute(1, 0, 2).reshape(kv_heads, n * group, 1)
        probs = torch.exp(torch.bmm(q_g[0], k_s[0].transpose(1, 2)) * sm_scale - lse_g)  # [kvh, n*g, n_tokens]
        mass = probs.view(kv_heads, n, group, prefix.num_blocks, block_size).sum(dim=(0, 2, 4))  # [n, blocks]
        if rows is None:
            block_mass[:, : prefix.num_blocks] += mass
        else:
            block_mass[rows, : prefix.num_blocks] += mass
    scores = torch.matmul(qf, keys.transpose(2, 3)) * sm_scale + layout.suffix_bias  # [R, kvh, g, L]
    per_token = torch.exp(scores - final_lse[..., None]).sum(dim=(1, 2))  # [R, L]
    width, max_suffix = layout.suffix_tables.shape[1], per_token.shape[1]
    per_block = F.pad(per_token, (0, width * block_size - max_suffix)).view(num_rows, width, block_size).sum(-1)
    block_mass.scatter_add_(1, layout.suffix_columns, per_block)


def _read(blocks: KVBlocks, ids: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
    """Dequantized K and V of whole blocks as ``[n_blocks * block_size, kvh, d]`` fp32 (a view for a slice of an
    fp32 pool)."""
    k, v = (
        dequantize(_of_blocks(data, ids), scale if scale is None or scale.dim() == 1 else _of_blocks(scale, ids))
        .flatten(0, 1)
        for data, scale in blocks.planes
    )
    return k, v


def _of_blocks(x: torch.Tensor, ids: torch.Tensor | slice) -> torch.Tensor:
    return x[ids] if isinstance(ids, slice) else take_rows(x, ids)
