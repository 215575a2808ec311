"""The GPUs the Triton kernels are built for, and the tile each kernel launches with there.

A paged kernel streams a sequence's K/V through tiles of ``tokens`` tokens x ``head_dim`` columns. On a GPU a tile
lives in registers and, around the dots, in shared memory, so one tile size does not fit every head size: at the old
fixed 64 tokens, head_dim 256 (pi0 / pi0.5's Gemma) needs 148 KB of shared memory, more than the 99 KB an sm_89
(RTX 4090, L4, L40S) or sm_86 block may use, and head_dim 128 spills registers at 4 warps. ``tile_config`` sizes the
tile from the head size (and shrinks it to the device's shared memory), so every model we serve launches on every
architecture; ``kernels.triton_impl.aot`` compiles each configuration for the architectures below ahead of time
(no GPU needed) and checks shared memory against this table and ptxas's register spills.
"""

from dataclasses import dataclass

# Maximum shared memory per thread block (opt-in), CUDA C Programming Guide, "Technical Specifications per Compute
# Capability" (8.0: 163 KB, 8.6 / 8.9: 99 KB, 8.7: 163 KB, 9.0: 227 KB)
SHARED_MEMORY_PER_BLOCK = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}
ARCHITECTURES = {80: "A100, A30", 86: "RTX 3090, A10, A40", 87: "Jetson AGX / NX Orin", 89: "RTX 4090, L4, L40S",
                 90: "H100, H200"}  # fmt: skip
MAX_TILE_TOKENS = 64  # tokens per loop iteration at small heads: wide for the interpreter, register-sized on GPU
MIN_TILE_TOKENS = 16  # the smallest tl.dot operand
ELEMENTS_PER_THREAD = 16  # K (or V) tile elements per thread: at 32, ptxas spills on sm_80 / sm_90 (``aot``)
WARPS = (4, 8)


@dataclass(frozen=True)
class TileConfig:
    tokens: int  # tokens per tile: a multiple of the padded block size (whole blocks per tile), power of two
    num_warps: int


def tile_config(head_dim: int, group: int = 1, shared_limit: int | None = None) -> TileConfig:
    """The tile of the paged kernels for ``head_dim`` columns and ``group`` query heads per kv-head: as many tokens as
    ``ELEMENTS_PER_THREAD`` per thread allow at 8 warps (4 when that is enough), halved until the decode kernel's
    shared memory (``decode_shared_bytes``) fits ``shared_limit`` (None: no limit, the interpreter)."""
    per_thread = ELEMENTS_PER_THREAD
    d_pad = padded_head_dim(head_dim)
    tokens = MAX_TILE_TOKENS
    while tokens > MIN_TILE_TOKENS and tokens * d_pad > per_thread * 32 * WARPS[-1]:
        tokens //= 2
    while (tokens > MIN_TILE_TOKENS and shared_limit is not None
           and decode_shared_bytes(tokens, head_dim, group) > shared_limit):  # fmt: skip
        tokens //= 2
    warps = next((w for w in WARPS if tokens * d_pad <= per_thread * 32 * w), WARPS[-1])
    return TileConfig(tokens, warps)


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
