"""Device helpers shared by the Triton kernels: paged addressing, loading codes, quantizing and storing.

fp8 is handled as raw bytes (the host passes a uint8 view) and decoded/encoded with integer arithmetic, not with
Triton's float8 types: the result is bit-identical to torch's conversion (round to nearest even) under the
interpreter, whose fp32 -> fp8 cast drops the mantissa carry, and on GPUs without native fp8 (sm < 89, e.g. Jetson
Orin).  The same care applies to bf16 outputs: values are rounded to nearest even in fp32 arithmetic before the
store, because the interpreter's fp32 -> bf16 cast truncates.
"""

from functools import cache

import torch
import triton
import triton.language as tl

from ..quant_spec import FP8_MAX, INT8_MAX, INT8_MIN_ABSMAX, KVQuantSpec

KIND_NONE = tl.constexpr(0)
KIND_INT8 = tl.constexpr(1)
KIND_FP8 = tl.constexpr(2)
KIND_INT8_CHANNEL = tl.constexpr(3)  # int8 keys: bf16 scales per (block, kv-head, channel)
_KIND_CODES = {"none": 0, "int8": 1, "fp8": 2}

_INT8_MAX = tl.constexpr(INT8_MAX)
_INT8_MIN_ABSMAX = tl.constexpr(INT8_MIN_ABSMAX)
_FP8_MAX = tl.constexpr(FP8_MAX)


def kind_code(dtype: torch.dtype) -> int:
    return _KIND_CODES[KVQuantSpec(dtype).kind]


def plane_kinds(dtype: torch.dtype) -> tuple[int, int]:
    """The kind codes of a format's K and V planes: int8 keys have per-channel scales, int8 values per-token ones."""
    kind = kind_code(dtype)
    return (KIND_INT8_CHANNEL.value if kind == KIND_INT8.value else kind), kind


def raw(data: torch.Tensor) -> torch.Tensor:
    """What a kernel gets for a code tensor: fp8 as its bytes (see the module docstring), the rest as is."""
    return data.view(torch.uint8) if data.dtype == torch.float8_e4m3fn else data


def scale_arg(scale: torch.Tensor | None, data: torch.Tensor) -> torch.Tensor:
    """A pointer for the scale argument; float storage has none and its kernels never read it."""
    return data if scale is None else scale


def tile_shape(block_size: int, tokens: int, limit: int | None = None) -> tuple[int, int]:
    """(block_size rounded up to a power of two, whole blocks per tile of ``tokens``): tiles hold whole blocks,
    padded. A block wider than the tile is refused on a GPU (``limit`` given: its kernels were sized for ``tokens``);
    the interpreter takes it as one tile."""
    padded = triton.next_power_of_2(block_size)
    if padded > tokens and limit is not None:
        raise ValueError(f"block_size {block_size} is wider than the {tokens}-token tile this GPU's paged kernels hold "
                         f"at this head size: use block_size <= {tokens}")
    return padded, max(1, tokens // padded)


def shared_limit(device: torch.device) -> int | None:
    """Shared memory one thread block may use on ``device`` (opt-in maximum); None off CUDA (the interpreter)."""
    if device.type != "cuda":
        return None
    return _cuda_shared_limit(device.index if device.index is not None else torch.cuda.current_device())


@cache
def _cuda_shared_limit(index: int) -> int:
    return torch.cuda.get_device_properties(index).shared_memory_per_block_optin


@triton.jit
def paged_tile(table_row_ptr, first_block, num_tokens, block_size, BS_PAD: tl.constexpr, BLOCKS: tl.constexpr):
    """Token lanes of ``BLOCKS`` table entries from ``first_block``: (position in the sequence, valid, flat slot).

    Lane ``n`` is offset ``n % BS_PAD`` of entry ``first_block + n // BS_PAD``; lanes past the block size (padding)
    or past ``num_tokens`` are invalid.  Any block size works, scrambled tables included.
    """
    lane = tl.arange(0, BLOCKS * BS_PAD)
    entry = first_block + lane // BS_PAD
    offset = lane % BS_PAD
    pos = entry * block_size + offset
    valid = (offset < block_size) & (pos < num_tokens)
    block = tl.load(table_row_ptr + entry, mask=valid, other=0).to(tl.int64)
    return pos, valid, block * block_size + offset


@triton.jit
def load_codes(data_ptr, scale_ptr, slots, valid, head, num_kv_heads, cols, head_dim, block_size, KIND: tl.constexpr):
    """Rows ``slots`` [R] of one head as fp32 codes [R, C] and their scales [R]: values = codes * scale[:, None].
    Per-channel (int8 key) scales cannot go on a row: they are applied here and the row scales are 1."""
    row = slots * num_kv_heads + head
    mask = valid[:, None] & (cols < head_dim)[None, :]
    codes = tl.load(data_ptr + row[:, None] * head_dim + cols[None, :], mask=mask, other=0)
    if KIND == KIND_FP8:
        values = fp8_decode(codes)
        scale = tl.zeros_like(row).to(tl.float32) + tl.load(scale_ptr + head)
    elif KIND == KIND_INT8:
        values = codes.to(tl.float32)
        scale = tl.load(scale_ptr + row, mask=valid, other=0.0)
    elif KIND == KIND_INT8_CHANNEL:
        channel = (slots // block_size * num_kv_heads + head)[:, None] * head_dim + cols[None, :]
        values = codes.to(tl.float32) * tl.load(scale_ptr + channel, mask=mask, other=0.0).to(tl.float32)
        scale = tl.zeros_like(row).to(tl.float32) + 1.0
    else:
        values = codes.to(tl.float32)
        scale = tl.zeros_like(row).to(tl.float32) + 1.0
    return values, scale


@triton.jit
def channel_scales(scale_ptr, block, head, num_kv_heads, cols, head_dim):
    """One block's per-channel (int8 key) scales for one head, [C] fp32: where a tile is one block, they multiply
    a row (the queries, or the block's values) instead of every code."""
    return tl.load(scale_ptr + (block * num_kv_heads + head) * head_dim + cols, mask=cols < head_dim,
                   other=0.0).to(tl.float32)  # fmt: skip


@triton.jit
def quantize_store(x, data_ptr, scale_ptr, slots, valid, head, num_kv_heads, cols, head_dim, KIND: tl.constexpr):
    """Store rows x [R, C] (padding columns 0) of one head at ``slots`` in the storage format; same math as
    ``kernels.quant.quantize``.  Float storage takes x as is (fp32 is rounded for a bf16 destination).  Per-channel
    (int8 key) storage is ``quantize_store_block``'s."""
    row = slots * num_kv_heads + head
    mask = valid[:, None] & (cols < head_dim)[None, :]
    ptrs = data_ptr + row[:, None] * head_dim + cols[None, :]
    if KIND == KIND_INT8:
        x = x.to(tl.float32)
        absmax = tl.maximum(tl.max(tl.abs(x), axis=1), _INT8_MIN_ABSMAX)
        codes = tl.floor(x * tl.div_rn(_INT8_MAX, absmax)[:, None] + 0.5)
        codes = tl.minimum(tl.maximum(codes, -_INT8_MAX), _INT8_MAX)
        tl.store(ptrs, codes.to(tl.int8), mask=mask)
        tl.store(scale_ptr + row, tl.div_rn(absmax, _INT8_MAX), mask=valid)
    elif KIND == KIND_FP8:
        y = tl.div_rn(x.to(tl.float32), tl.load(scale_ptr + head))
        tl.store(ptrs, fp8_encode(tl.minimum(tl.maximum(y, -_FP8_MAX), _FP8_MAX)), mask=mask)
    else:
        tl.store(ptrs, round_for(x, data_ptr), mask=mask)


@triton.jit
def quantize_store_block(x, data_ptr, scale_ptr, block, offsets, valid, head, num_kv_heads, cols, head_dim,
                         block_size):  # fmt: skip
    """Store one block's rows x [R, C] (rows at ``offsets``; invalid rows and padding columns 0) of one head as int8
    codes with per-channel bf16 scales over the rows; same math as ``kernels.quant.quantize_channels``."""
    x = x.to(tl.float32)
    absmax = tl.maximum(tl.max(tl.abs(x), axis=0), _INT8_MIN_ABSMAX)
    scale = bf16_round(tl.div_rn(absmax, _INT8_MAX))
    codes = tl.floor(tl.div_rn(x, scale[None, :]) + 0.5)
    codes = tl.minimum(tl.maximum(codes, -_INT8_MAX), _INT8_MAX)
    col_mask = cols < head_dim
    rows = (block * block_size + offsets) * num_kv_heads + head
    tl.store(data_ptr + rows[:, None] * head_dim + cols[None, :], codes.to(tl.int8),
             mask=valid[:, None] & col_mask[None, :])  # fmt: skip
    tl.store(scale_ptr + (block * num_kv_heads + head) * head_dim + cols, scale, mask=col_mask)


@triton.jit
def bf16_round(x):
    """fp32 x rounded to the nearest even bf16, as fp32 (exact to store to bf16; the interpreter's cast truncates)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def round_for(x, ptr):
    """fp32 x rounded to nearest even for a bf16 destination (so the store's cast is exact); otherwise x."""
    if x.dtype == tl.float32 and ptr.dtype.element_ty == tl.bfloat16:
        x = bf16_round(x)
    return x


@triton.jit
def fp8_decode(code):
    """float8_e4m3fn bytes -> fp32 (exact; no NaN codes are ever written)."""
    bits = code.to(tl.int32)
    exponent = (bits >> 3) & 0xF
    mantissa = bits & 0x7
    normal = (((exponent + 120) << 23) | (mantissa << 20)).to(tl.float32, bitcast=True)
    magnitude = tl.where(exponent == 0, mantissa.to(tl.float32) * 0.001953125, normal)  # subnormal: m * 2^-9
    return tl.where((bits & 0x80) != 0, -magnitude, magnitude)


@triton.jit
def fp8_encode(y):
    """fp32 y with |y| <= 448 -> float8_e4m3fn bytes, rounded to nearest even like torch's conversion."""
    bits = y.to(tl.int32, bitcast=True)
    a = tl.abs(y)
    # Grid step of a's binade: 3 mantissa bits, and subnormals share the step of the lowest normal binade 2^-6.
    exponent = tl.maximum(((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, -6)
    step = ((exponent - 3 + 127) << 23).to(tl.float32, bitcast=True)
    t = a * ((127 - exponent + 3) << 23).to(tl.float32, bitcast=True)  # a / step, exact
    whole = tl.floor(t)
    frac = t - whole
    odd = whole - 2.0 * tl.floor(whole * 0.5)
    magnitude = (whole + tl.where(frac > 0.5, 1.0, tl.where(frac < 0.5, 0.0, odd))) * step
    mbits = magnitude.to(tl.int32, bitcast=True)
    normal = ((((mbits >> 23) & 0xFF) - 120) << 3) | ((mbits >> 20) & 0x7)
    code = tl.where(magnitude >= 0.015625, normal, (magnitude * 512.0).to(tl.int32))  # below 2^-6: m * 2^-9
    return (code | ((bits >> 24) & 0x80)).to(tl.uint8)
