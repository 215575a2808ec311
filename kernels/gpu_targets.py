"""The GPUs the Triton kernels are built for, and the tile each kernel launches with there.

A paged kernel streams a sequence's K/V through tiles of ``tokens`` tokens x ``head_dim`` columns. On a GPU a tile
lives in registers and, around the dots, in shared memory, so one tile size does not fit every head size: at the old
fixed 64 tokens, head_dim 256 (pi0 / pi0.5's Gemma) needed 145 KB (148224 B) of shared memory, more than the 99 KB
an sm_89 (RTX 4090, L4, L40S) or sm_86 block may use, and wide heads spilled registers. ``tile_config`` sizes the
tile from the head size (and shrinks it to the device's shared memory, or refuses), so every model we serve launches
on every architecture; ``kernels.triton_impl.aot`` compiles each launch for the architectures below ahead of time
(no GPU needed) and checks shared memory against this table and ptxas's register spills.
"""

from dataclasses import dataclass
from functools import cache

# Maximum shared memory per thread block (opt-in), CUDA C Programming Guide, "Technical Specifications per Compute
# Capability" (8.0: 163 KB, 8.6 / 8.9: 99 KB, 8.7: 163 KB, 9.0: 227 KB)
SHARED_MEMORY_PER_BLOCK = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}
ARCHITECTURES = {80: "A100, A30", 86: "RTX 3090, A10, A40", 87: "Jetson AGX / NX Orin", 89: "RTX 4090, L4, L40S",
                 90: "H100, H200"}  # fmt: skip
MAX_TILE_TOKENS = 64  # tokens per loop iteration at small heads: wide for the interpreter, register-sized on GPU
MIN_TILE_TOKENS = 16  # the smallest tl.dot operand
ELEMENTS_PER_THREAD = 16  # K (or V) tile elements per thread of gather / write_kv: at 32 ptxas spills (``aot``)
WARPS = (4, 8)
# Registers per thread the decode kernel may use (PTX .maxnreg; 255 is every architecture's per-thread maximum).
# Without it ptxas caps some launches by an occupancy heuristic at 64-80 registers and spills 12-44 B where their
# neighbours take 90-110 (``aot``: pi0.5 int8 with the log-sum-exp alone on sm_90, a mixed pool's 8-token bf16 units
# on sm_80); with it the same launches take 88-96 registers and spill nothing.
MAX_REGISTERS = 255


@dataclass(frozen=True)
class TileConfig:
    tokens: int  # tokens per tile, a power of two (whole blocks of a padded block size up to it: tile_shape)
    num_warps: int
    num_stages: int = 1  # loads in flight per loop iteration (Triton's software pipelining; 1 = none)


# The paged decode kernel's tile per (padded head_dim, dot precision), found by compiling every launch for every
# architecture with each candidate (``aot``, Triton 3.9, 2026-12-04): the widest tile with no register spill
# anywhere. Software pipelining (Triton's default 3 stages, or 2) spills on some architecture in every row, so
# loads are not pipelined: the programs (sequences x kv-heads) hide their latency instead.
DECODE_TILES = {
    (64, "tf32"): TileConfig(64, 8), (128, "tf32"): TileConfig(32, 4), (256, "tf32"): TileConfig(16, 8),
    (64, "ieee"): TileConfig(32, 4), (128, "ieee"): TileConfig(32, 8), (256, "ieee"): TileConfig(16, 8),
}  # fmt: skip


@cache  # called per layer and step by the launchers
def tile_config(head_dim: int) -> TileConfig:
    """The tile of the gather and write_kv kernels for ``head_dim`` columns: as many tokens as
    ``ELEMENTS_PER_THREAD`` per thread allow at 8 warps (4 when that is enough). No dots: no shared memory to fit."""
    d_pad = padded_head_dim(head_dim)
    tokens = MAX_TILE_TOKENS
    while tokens > MIN_TILE_TOKENS and tokens * d_pad > ELEMENTS_PER_THREAD * 32 * WARPS[-1]:
        tokens //= 2
    warps = next((w for w in WARPS if tokens * d_pad <= ELEMENTS_PER_THREAD * 32 * w), WARPS[-1])
    return TileConfig(tokens, warps)


@cache
def decode_tile(head_dim: int, group: int, dot: str, shared_limit: int | None) -> TileConfig:
    """The paged decode kernel's tile for ``head_dim`` columns, ``group`` query heads per kv-head and ``dot``
    precision: ``DECODE_TILES``' (narrower heads take its narrowest row, wider ones are refused on a GPU), halved
    until its shared memory
    (``decode_shared_bytes``) fits ``shared_limit`` (None: no limit, the interpreter), or refused."""
    d_pad, widest = padded_head_dim(head_dim), max(d for d, _ in DECODE_TILES)
    if d_pad > widest and shared_limit is not None:
        raise ValueError(f"head_dim {head_dim}: the decode kernel's tiles are checked for head sizes up to {widest} "
                         "only (kernels/gpu_targets.py)")  # fmt: skip
    tile = DECODE_TILES[(min(max(d_pad, min(d for d, _ in DECODE_TILES)), widest), dot)]  # narrower: the 64 tile
    tokens = tile.tokens
    while (tokens > MIN_TILE_TOKENS and shared_limit is not None
           and decode_shared_bytes(tokens, head_dim, group) > shared_limit):  # fmt: skip
        tokens //= 2
    if shared_limit is not None and decode_shared_bytes(tokens, head_dim, group) > shared_limit:
        raise ValueError(f"head_dim {head_dim} with {group} query heads per kv-head needs "
                         f"{decode_shared_bytes(tokens, head_dim, group)} B of shared memory at the smallest tile, "
                         f"more than this GPU's {shared_limit} B per block")  # fmt: skip
    return TileConfig(tokens, tile.num_warps, tile.num_stages)


def padded_head_dim(head_dim: int) -> int:
    """Columns of a tile: the head size rounded up to a power of two, at least 16 (the smallest tl.dot)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def padded_group(group: int) -> int:
    """Rows of the decode kernel's query tile: the query heads of one kv-head, padded to a power of two >= 16."""
    return max(16, 1 << (group - 1).bit_length())


def decode_shared_bytes(tokens: int, head_dim: int, group: int = 1) -> int:
    """An upper bound of the paged decode kernel's shared memory: K and V tiles staged as fp32 for the dots, the fp32
    query tile, and 8 KB for layout conversions and reductions (``aot`` checks the bound against Triton's allocation
    on every architecture; fp32 storage takes up to 5 KB more than 16-bit)."""
    d_pad = padded_head_dim(head_dim)
    return 8 * tokens * d_pad + 4 * padded_group(group) * d_pad + 8192
