"""A matrix-vector product that reads fp32 (or bf16) weights at the DRAM rate: the products of a decode step of one to
eight sequences on a CPU.

A decode step of a few sequences multiplies every weight once by a few vectors, so its time is the time the weights take
to stream in. oneDNN's fp32 product reads them at about half the rate a plain sum over the same bytes does here;
``cpu/matvec.c`` reads one row's worth as fast as torch's sum does: each thread walks its rows one after another (one
sequential stream, which the prefetcher follows) with 256-bit loads (faster streams than 512-bit ones on this Zen 4).
Two to eight input rows share each weight load and prefetch the stream ahead (~1.2-1.5x oneDNN's blocked product at 2-8
rows). The decoder layers of a batch-1 token run whole in ``cpu/llama_decode_row.c``; this product serves the LM head
and any packed layer given up to ``STREAMED_MAX_INPUTS`` rows. bf16 weights are widened to fp32 exactly as they stream
in: half the bytes, fp32 products. Where the C kernels do not run (``cpu_library``), ``matvec_kernel()`` is None and
callers keep oneDNN.
"""

import ctypes
from collections.abc import Callable
from functools import cache

import torch

from .cpu_library import library

Matvec = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
STREAMED_DTYPES = frozenset((torch.float32, torch.bfloat16))  # weight formats it reads (bf16 widened exactly)
STREAMED_MAX_INPUTS = 8  # input rows one pass serves (cpu/vector.h); more go to oneDNN's blocked products


@cache
def matvec_kernel() -> Matvec | None:
    """``matvec(weight [n, k], x [m, k] or [k]) -> [m, n] or [n]`` (x fp32 and contiguous, 1 <= m <=
    ``STREAMED_MAX_INPUTS``; the weight fp32 or bf16, contiguous, CPU), or None where it cannot run."""
    kernels = library()
    if kernels is None:
        return None
    function = kernels.matvec
    function.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_int64, ctypes.c_int64, ctypes.c_int]  # fmt: skip
    function.restype = None

    def matvec(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        n, k = weight.shape
        m = 1 if x.dim() == 1 else x.shape[0]
        if not (x.dim() <= 2 and 1 <= m <= STREAMED_MAX_INPUTS and x.shape[-1] == k and x.dtype == torch.float32
                and x.is_contiguous()):  # fmt: skip
            raise ValueError(f"matvec takes 1 to {STREAMED_MAX_INPUTS} contiguous fp32 rows of {k}, "
                             f"got {tuple(x.shape)} {x.dtype}")
        out = torch.empty((*x.shape[:-1], n), dtype=torch.float32)
        bf16 = weight.dtype == torch.bfloat16
        function(weight.data_ptr(), bf16, x.data_ptr(), out.data_ptr(), m, n, k, torch.get_num_threads())
        return out

    return matvec


def can_stream(weight: torch.Tensor) -> bool:
    """Whether ``matvec`` can read this weight as it is."""
    return weight.device.type == "cpu" and weight.dtype in STREAMED_DTYPES and weight.is_contiguous()
