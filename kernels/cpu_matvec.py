"""A matrix-vector product that reads fp32, bf16, int8 or Q4_1 weights at the DRAM rate: the products of a decode step of one to
eight sequences on a CPU.

A decode step of a few sequences multiplies every weight once by a few vectors, so its time is the time the weights take
to stream in. oneDNN's fp32 product reads them at about half the rate a plain sum over the same bytes does here;
``cpu/matvec.c`` reads one row's worth as fast as torch's sum does: each thread walks its rows one after another (one
sequential stream, which the prefetcher follows) with 256-bit loads (faster streams than 512-bit ones on this Zen 4).
Two to eight input rows share each weight load and prefetch the stream ahead (~1.2-1.5x oneDNN's blocked product at 2-8
rows). The decoder layers of a decode step of up to eight sequences run whole in ``cpu/llama_decode_row.c``; this
product serves the LM head and any packed layer given up to ``STREAMED_MAX_INPUTS`` rows. bf16 weights are widened to
fp32 exactly as they stream in: half the bytes, fp32 products. int8 weights (``quantize_int8``: one fp32 scale per 32 weights of a row, their
absmax / 127) are widened and scaled as they stream into fp32 products: 1.125 bytes a weight, 0.28 of fp32's. Q4_1
weights are llama.cpp's GGUF blocks as its quantizer writes them (``quantize_q4_1``: per 32 weights of a row an fp16
scale and minimum and 32 nibbles, 0.625 bytes a weight, 0.16 of fp32's), each weight dequantized to d * q + m as it
streams in, as llama.cpp's own dequantization computes it: over a GGUF's Q4_1 tensors these are the very fp32 weights
the loader gives, at a sixth of the bytes, and over its Q4_0 tensors too (a Q4_0 block is the Q4_1 block m = -8d).
Where the C kernels do not run (``cpu_library``), ``matvec_kernel()`` is None and callers keep oneDNN.
"""

import ctypes
from collections.abc import Callable
from functools import cache

import numpy as np
import torch

from .cpu_abi import (
    I8_GROUP,
    Q4_1_BYTES,
    Q4_1_GROUP,
    STREAMED_MAX_INPUTS,
    WEIGHTS_BF16,
    WEIGHTS_F32,
    WEIGHTS_I8,
    WEIGHTS_Q4_1,
)
from .cpu_library import library

Matvec = Callable[..., torch.Tensor]  # (weight, x, scales=None) -> y
Q4_1 = torch.uint8  # the dtype Q4_1 blocks are stored in, and how weight_dtype names the format (torch has no Q4_1)
QUANTIZED_WEIGHTS = {"int8": torch.int8, "q4_1": Q4_1}  # weight_dtype's quantized names -> the dtypes they store in
WEIGHT_FORMATS = {torch.float32: WEIGHTS_F32, torch.bfloat16: WEIGHTS_BF16, torch.int8: WEIGHTS_I8, Q4_1: WEIGHTS_Q4_1}
STREAMED_DTYPES = frozenset(WEIGHT_FORMATS)  # weight formats it reads (bf16 widened exactly, int8 with group scales)


@cache
def matvec_kernel() -> Matvec | None:
    """``matvec(weight [n, k], x [m, k] or [k], scales=None) -> [m, n] or [n]`` (x fp32 and contiguous, 1 <= m <=
    ``STREAMED_MAX_INPUTS``; the weight fp32, bf16 or int8, contiguous, CPU; int8 with its fp32 group ``scales``; Q4_1
    blocks ``[n, k / 32, 20]``), or None where it cannot run."""
    kernels = library()
    if kernels is None:
        return None
    function = kernels.matvec
    function.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]  # fmt: skip
    function.restype = None

    def matvec(weight: torch.Tensor, x: torch.Tensor, scales: torch.Tensor | None = None) -> torch.Tensor:
        if not can_stream(weight):
            raise ValueError(f"matvec reads contiguous CPU weights in {sorted(map(str, STREAMED_DTYPES))} (Q4_1: "
                             f"blocks [out, in / {Q4_1_GROUP}, {Q4_1_BYTES}]), got {tuple(weight.shape)} {weight.dtype}")
        n, k = weight_shape(weight)
        m = 1 if x.dim() == 1 else x.shape[0]
        if not (x.dim() <= 2 and 1 <= m <= STREAMED_MAX_INPUTS and x.shape[-1] == k and x.dtype == torch.float32
                and x.is_contiguous()):  # fmt: skip
            raise ValueError(f"matvec takes 1 to {STREAMED_MAX_INPUTS} contiguous fp32 rows of {k}, "
                             f"got {tuple(x.shape)} {x.dtype}")
        int8 = weight.dtype == torch.int8
        if int8 != (scales is not None) or (int8 and not _group_scales(scales, n, k)):
            raise ValueError(f"int8 weights take fp32 scales [{n}, {-(-k // I8_GROUP)}] (one per {I8_GROUP} "
                             "weights of a row), other formats none")
        out = torch.empty((*x.shape[:-1], n), dtype=torch.float32)
        function(weight.data_ptr(), WEIGHT_FORMATS[weight.dtype], scales.data_ptr() if int8 else None, x.data_ptr(),
                 out.data_ptr(), m, n, k, torch.get_num_threads())  # fmt: skip
        return out

    return matvec


def weight_format_name(dtype: torch.dtype) -> str:
    """How ``weight_dtype`` spells a stored format: ``q4_1`` for Q4_1 blocks, ``int8``, else the dtype's own name."""
    names = {stored: name for name, stored in QUANTIZED_WEIGHTS.items()}
    return names.get(dtype, str(dtype).removeprefix("torch."))


def weight_shape(weight: torch.Tensor) -> tuple[int, int]:
    """The ``[out, in]`` shape of the matrix ``weight`` stores: its own, or Q4_1 blocks' ``[out, in / 32, 20]``."""
    if weight.dtype == Q4_1:
        if weight.dim() != 3 or weight.shape[2] != Q4_1_BYTES:
            raise ValueError(f"Q4_1 weights are blocks [out, in / {Q4_1_GROUP}, {Q4_1_BYTES}], got {tuple(weight.shape)}")
        return weight.shape[0], weight.shape[1] * Q4_1_GROUP
    rows, cols = weight.shape
    return rows, cols


def can_stream(weight: torch.Tensor) -> bool:
    """Whether ``matvec`` can read this weight as it is."""
    blocks = weight.dtype != Q4_1 or (weight.dim() == 3 and weight.shape[2] == Q4_1_BYTES)
    return weight.device.type == "cpu" and weight.dtype in STREAMED_DTYPES and weight.is_contiguous() and blocks


def _group_scales(scales: torch.Tensor, rows: int, cols: int) -> bool:
    return (scales.dtype == torch.float32 and scales.shape == (rows, -(-cols // I8_GROUP)) and scales.is_contiguous()
            and scales.device.type == "cpu")  # fmt: skip


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` [n, k] as int8 and one fp32 scale per ``I8_GROUP`` weights of a row (the group's absmax / 127,
    rounded to nearest; llama.cpp's Q8_0 grouping with fp32 scales), what the int8 products read: scales
    [n, ceil(k / I8_GROUP)]. An all-zero group gets scale 1 (its integers are 0). Over a Q8_0 GGUF's dequantized
    values it keeps the values exactly, as the blocks' own codes and fp16 scales wherever a block's d is not 0
    (test_int8_groups_hold_gguf_q8_0_blocks_exactly)."""
    values = weight.detach().float()
    n, k = values.shape
    padded = torch.nn.functional.pad(values, (0, -k % I8_GROUP)).view(n, -1, I8_GROUP)
    scales = padded.abs().amax(dim=2) / 127.0
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    rows = torch.round(padded / scales[:, :, None]).clamp_(-127, 127).to(torch.int8).view(n, -1)[:, :k]
    return rows.contiguous(), scales.contiguous()


def dequantize_int8(rows: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The fp32 values int8 ``rows`` and their group ``scales`` stand for."""
    return rows.float() * scales.repeat_interleave(I8_GROUP, dim=1)[:, : rows.shape[1]]


def quantize_q4_1(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` [n, k] (k a multiple of 32) as GGUF Q4_1 blocks ``[n, k / 32, 20]``, by gguf-py's port of llama.cpp's
    reference quantizer (d = (max - min) / 15 and m = min per 32 weights, stored as fp16; q = (x - min) / d rounded),
    except where a block is closer to its weights as llama.cpp's Q4_0 writes it (``_as_q4_0``).

    Over weights a Q4_1 GGUF was dequantized into it gives the file's own blocks back, byte for byte; over a Q4_0
    GGUF's it gives blocks that stand for the file's values exactly (the reference's grid misses those of a block
    whose codes do not reach both 0 and 15)."""
    from gguf import GGMLQuantizationType, quants

    n, k = weight.shape
    if k % Q4_1_GROUP:
        raise ValueError(f"Q4_1 weights need rows of a multiple of {Q4_1_GROUP} weights, got {k}")
    x = weight.detach().float().contiguous()
    blocks = quants.quantize(x.numpy(), GGMLQuantizationType.Q4_1)
    blocks = torch.from_numpy(np.ascontiguousarray(blocks)).view(n, k // Q4_1_GROUP, Q4_1_BYTES)
    groups = x.view(n, k // Q4_1_GROUP, Q4_1_GROUP)
    q4_0 = _as_q4_0(x)
    closer = _block_error(q4_0, groups) < _block_error(blocks, groups)
    blocks[closer] = q4_0[closer]
    return blocks


def _as_q4_0(x: torch.Tensor) -> torch.Tensor:
    """``x`` [n, k] as llama.cpp's Q4_0 quantizer writes it (gguf-py's port: d = the weight of largest magnitude / -8,
    q = x / d + 8 rounded, values d * (q - 8)), each block rewritten as the Q4_1 block of the same values: d, m =
    -8 * d (exact in fp16: a power of two times d), the same nibbles. [n, k / 32, 20]. Over a Q4_0 GGUF's values the
    quantizer gives the file's blocks back (the largest magnitude is -8 * d exactly, the rest d * (q - 8))."""
    from gguf import GGMLQuantizationType, quants

    n, k = x.shape
    q4_0 = torch.from_numpy(quants.quantize(x.numpy(), GGMLQuantizationType.Q4_0)).view(n, k // Q4_1_GROUP, -1)
    d = q4_0[..., :2].contiguous().view(torch.float16)
    m = (d.float() * -8).half().view(torch.uint8)
    return torch.cat([q4_0[..., :2], m, q4_0[..., 2:]], dim=-1).contiguous()


def _block_error(blocks: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Squared error of each block's values against ``groups`` [n, b, 32]: [n, b]."""
    return (dequantize_q4_1(blocks).view_as(groups) - groups).pow(2).sum(-1)


def dequantize_q4_1(blocks: torch.Tensor) -> torch.Tensor:
    """The fp32 values Q4_1 ``blocks`` [n, k / 32, 20] stand for (d * q + m), as gguf-py computes them: ``[n, k]``."""
    from gguf import GGMLQuantizationType, quants

    n, k = weight_shape(blocks)
    values = quants.dequantize(blocks.reshape(n, -1).numpy(), GGMLQuantizationType.Q4_1)
    return torch.from_numpy(np.array(values, dtype=np.float32)).view(n, k)
