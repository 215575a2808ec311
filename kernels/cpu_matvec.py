"""A matrix-vector product that reads fp32, bf16 or int8 weights at the DRAM rate: the products of a decode step of one to
eight sequences on a CPU.

A decode step of a few sequences multiplies every weight once by a few vectors, so its time is the time the weights take
to stream in. oneDNN's fp32 product reads them at about half the rate a plain sum over the same bytes does here;
``cpu/matvec.c`` reads one row's worth as fast as torch's sum does: each thread walks its rows one after another (one
sequential stream, which the prefetcher follows) with 256-bit loads (faster streams than 512-bit ones on this Zen 4).
Two to eight input rows share each weight load and prefetch the stream ahead (~1.2-1.5x oneDNN's blocked product at 2-8
rows). The decoder layers of a batch-1 token run whole in ``cpu/llama_decode_row.c``; this product serves the LM head
and any packed layer given up to ``STREAMED_MAX_INPUTS`` rows. bf16 weights are widened to fp32 exactly as they stream
in: half the bytes, fp32 products. int8 weights (``quantize_int8``: one fp32 scale per 32 weights of a row, their
absmax / 127) are widened and scaled as they stream into fp32 products: 1.125 bytes a weight, 0.28 of fp32's. Where the C kernels do
not run (``cpu_library``), ``matvec_kernel()`` is None and callers keep oneDNN.
"""

import ctypes
from collections.abc import Callable
from functools import cache

import torch

from .cpu_library import library

Matvec = Callable[..., torch.Tensor]  # (weight, x, scales=None) -> y
WEIGHT_FORMATS = {torch.float32: 0, torch.bfloat16: 1, torch.int8: 2}  # cpu/oxygen_kernels.h's WEIGHTS_F32 / BF16 / I8
STREAMED_DTYPES = frozenset(WEIGHT_FORMATS)  # weight formats it reads (bf16 widened exactly, int8 with group scales)
INT8_GROUP = 32  # int8 weights a scale covers along a row (cpu/oxygen_kernels.h's I8_GROUP)
STREAMED_MAX_INPUTS = 8  # input rows one pass serves (cpu/vector.h); more go to oneDNN's blocked products


@cache
def matvec_kernel() -> Matvec | None:
    """``matvec(weight [n, k], x [m, k] or [k], scales=None) -> [m, n] or [n]`` (x fp32 and contiguous, 1 <= m <=
    ``STREAMED_MAX_INPUTS``; the weight fp32, bf16 or int8, contiguous, CPU; int8 with its fp32 group ``scales``), or
    None where it cannot run."""
    kernels = library()
    if kernels is None:
        return None
    function = kernels.matvec
    function.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]  # fmt: skip
    function.restype = None

    def matvec(weight: torch.Tensor, x: torch.Tensor, scales: torch.Tensor | None = None) -> torch.Tensor:
        n, k = weight.shape
        m = 1 if x.dim() == 1 else x.shape[0]
        if not (x.dim() <= 2 and 1 <= m <= STREAMED_MAX_INPUTS and x.shape[-1] == k and x.dtype == torch.float32
                and x.is_contiguous()):  # fmt: skip
            raise ValueError(f"matvec takes 1 to {STREAMED_MAX_INPUTS} contiguous fp32 rows of {k}, "
                             f"got {tuple(x.shape)} {x.dtype}")
        int8 = weight.dtype == torch.int8
        if int8 != (scales is not None) or (int8 and not _group_scales(scales, n, k)):
            raise ValueError(f"int8 weights take fp32 scales [{n}, {-(-k // INT8_GROUP)}] (one per {INT8_GROUP} "
                             "weights of a row), other formats none")
        out = torch.empty((*x.shape[:-1], n), dtype=torch.float32)
        function(weight.data_ptr(), WEIGHT_FORMATS[weight.dtype], scales.data_ptr() if int8 else None, x.data_ptr(),
                 out.data_ptr(), m, n, k, torch.get_num_threads())  # fmt: skip
        return out

    return matvec


def can_stream(weight: torch.Tensor) -> bool:
    """Whether ``matvec`` can read this weight as it is."""
    return weight.device.type == "cpu" and weight.dtype in STREAMED_DTYPES and weight.is_contiguous()


def _group_scales(scales: torch.Tensor, rows: int, cols: int) -> bool:
    return (scales.dtype == torch.float32 and scales.shape == (rows, -(-cols // INT8_GROUP)) and scales.is_contiguous()
            and scales.device.type == "cpu")  # fmt: skip


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` [n, k] as int8 and one fp32 scale per ``INT8_GROUP`` weights of a row (the group's absmax / 127,
    rounded to nearest; llama.cpp's Q8_0 grouping with fp32 scales), what the int8 products read: scales
    [n, ceil(k / INT8_GROUP)]. An all-zero group gets scale 1 (its integers are 0)."""
    values = weight.detach().float()
    n, k = values.shape
    padded = torch.nn.functional.pad(values, (0, -k % INT8_GROUP)).view(n, -1, INT8_GROUP)
    scales = padded.abs().amax(dim=2) / 127.0
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    rows = torch.round(padded / scales[:, :, None]).clamp_(-127, 127).to(torch.int8).view(n, -1)[:, :k]
    return rows.contiguous(), scales.contiguous()


def dequantize_int8(rows: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The fp32 values int8 ``rows`` and their group ``scales`` stand for."""
    return rows.float() * scales.repeat_interleave(INT8_GROUP, dim=1)[:, : rows.shape[1]]
