"""``cpu_paged_decode``: attention of one query per row over an fp32 or int8 pool on a CPU, read in place
(``cpu/paged_decode.c``): a decode step's rows, or a short prefill chunk's tokens as rows (``kv.token_rows``).

The torch path (``cascade_decode``) copies what it reads out of the pool and merges partial attentions in several
ops per layer; the C kernel reads each sequence's blocks where they are, through its block table. Blocks that a group
of sequences shares (``PrefixGroups``, planned once per step by ``kv.cascade.plan_prefix_groups``) are attended by all
the group's queries at once as matrix products, the rest by dot products, merged exactly. An int8 pool (keys per
channel over each block, values per token: ``quant_spec``) is read as codes and scales, every row by dot products
over its whole context (its groups are not read). Same contract as ``paged_decode_attention`` with a ``[B,
max_blocks]`` block mass; callers ask ``can_read``.
"""

import ctypes
import threading
from dataclasses import dataclass
from functools import cache

import torch

from .cpu_abi import KV_F32, KV_I8, PagedDecode
from .cpu_library import library
from .quant_spec import KVBlocks

MAX_HEAD_DIM = 256  # a query head is kept in 16 vector registers
_scratch = threading.local()  # one buffer per thread, grown as needed: a fresh ~1 MB per layer call would be faulted in
KEPT_SCRATCH_FLOATS = 1 << 23  # a larger need (32 MB) gets a buffer of its own for that call


@dataclass(frozen=True)
class PrefixGroups:
    """Rows of a decode step that share leading blocks: group g is ``rows[starts[g]:starts[g + 1]]`` (batch rows),
    sharing their first ``blocks[g]`` table entries (int64 tensors; a row in no group is alone)."""

    rows: torch.Tensor
    starts: torch.Tensor
    blocks: torch.Tensor

    @classmethod
    def of(cls, groups: list[tuple[list[int], int]], device: torch.device) -> "PrefixGroups":
        """From (rows, blocks they share) pairs, as a plan lists them."""
        starts = [0]
        for rows, _ in groups:
            starts.append(starts[-1] + len(rows))
        return cls(torch.tensor([r for rows, _ in groups for r in rows], dtype=torch.long, device=device),
                   torch.tensor(starts, dtype=torch.long, device=device),
                   torch.tensor([count for _, count in groups], dtype=torch.long, device=device))  # fmt: skip


@cache
def _functions() -> tuple | None:
    kernels = library()
    if kernels is None:
        return None
    run, scratch = kernels.paged_decode, kernels.paged_decode_scratch
    run.argtypes, run.restype = [ctypes.POINTER(PagedDecode), ctypes.c_int], None
    scratch.argtypes, scratch.restype = [ctypes.POINTER(PagedDecode)], ctypes.c_int64
    return run, scratch


def can_read(blocks: KVBlocks) -> bool:
    """Whether the kernel runs here and reads this layer's storage (fp32, or int8: its one layout, ``KVBlocks``
    checks its scales' shapes and dtypes; on a CPU; head_dim a multiple of 16)."""
    return (_functions() is not None and blocks.k.device.type == "cpu" and blocks.head_dim % 16 == 0
            and blocks.head_dim <= MAX_HEAD_DIM and blocks.k.dtype in (torch.float32, torch.int8))  # fmt: skip


def cpu_paged_decode(
    q: torch.Tensor, blocks: KVBlocks, block_tables: torch.Tensor, context_lens: torch.Tensor, max_context: int,
    sm_scale: float, *, groups: PrefixGroups | None = None, block_mass: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of ``q`` ``[B, H, d]`` over each sequence's first ``context_lens[b]`` pool tokens (int64 ``[B]``,
    ``max_context`` its largest value, known to the caller: reading it back would sync); ``groups``: rows whose
    shared leading blocks are read once for all of them (each group's blocks must lie before its rows' newest
    tokens); ``block_mass`` fp32 ``[B, max_blocks]`` gains each table entry's mass summed over heads. Returns ``[B,
    H, d]`` in q's dtype."""
    run, scratch_floats = _functions()
    num_seqs, num_heads, head_dim = q.shape
    if num_heads % blocks.num_kv_heads or head_dim != blocks.head_dim:
        raise ValueError(f"cpu_paged_decode: q {tuple(q.shape)} does not fit {blocks.num_kv_heads} kv-heads of dim "
                         f"{blocks.head_dim}")
    queries = q.float().contiguous()
    tables = block_tables.to(torch.int64).contiguous()
    lengths = context_lens.to(torch.int64).contiguous()
    out = torch.empty_like(queries)
    if block_mass is not None and (block_mass.shape != tables.shape or not block_mass.is_contiguous()):
        raise ValueError(f"block_mass must be a contiguous fp32 {tuple(tables.shape)}, got {tuple(block_mass.shape)}")
    group_ptrs = (0, 0, 0) if groups is None else (groups.rows.data_ptr(), groups.starts.data_ptr(),
                                                   groups.blocks.data_ptr())  # fmt: skip
    int8 = blocks.k.dtype == torch.int8
    scales = (blocks.k_scale.data_ptr(), blocks.v_scale.data_ptr()) if int8 else (0, 0)
    args = PagedDecode(queries.data_ptr(), blocks.k.data_ptr(), blocks.v.data_ptr(), tables.data_ptr(),
                       lengths.data_ptr(), out.data_ptr(), 0 if block_mass is None else block_mass.data_ptr(), 0,
                       *group_ptrs, *scales, num_seqs, num_heads, blocks.num_kv_heads, head_dim, blocks.block_size,
                       tables.shape[1], max_context, 0 if groups is None else groups.blocks.shape[0],
                       KV_I8 if int8 else KV_F32, sm_scale)  # fmt: skip
    args.scratch = _scratch_buffer(scratch_floats(ctypes.byref(args))).data_ptr()
    run(ctypes.byref(args), torch.get_num_threads())
    return out.to(q.dtype)


def _scratch_buffer(floats: int) -> torch.Tensor:
    """This thread's kernel scratch, at least ``floats`` long (the kernel writes before it reads: no zeroing)."""
    if floats > KEPT_SCRATCH_FLOATS:
        return torch.empty(floats)
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.numel() < floats:
        grown = min(KEPT_SCRATCH_FLOATS, 2 * (0 if buffer is None else buffer.numel()))
        buffer = _scratch.buffer = torch.empty(max(floats, grown))
    return buffer
