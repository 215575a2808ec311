"""A decoder layer's element-wise steps over a batch's rows in one C call each (``cpu/row_ops.c``).

In a batched decode step each of these is a handful of torch ops over a few kilobytes (RoPE alone is a slice, a
negation, a concatenation, two products and a sum per layer), whose dispatch costs more than the arithmetic. Each
function runs the kernel on fp32 contiguous CPU tensors where the C kernels are built (``cpu_library``) and returns None
otherwise, so the layer keeps its torch ops, which stay the reference the kernels are tested against.
"""

import ctypes
from functools import cache

import torch

from .cpu_library import library

_P, _I, _F, _T = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int


@cache
def _kernels() -> ctypes.CDLL | None:
    kernels = library()
    if kernels is None:
        return None
    kernels.add_rms_norm_f32.argtypes = [_P, _P, _P, _P, _P, _I, _I, _F, _T]
    kernels.rotate_half_f32.argtypes = [_P, _I, _I, _I, _I, _P, _P, _T]
    kernels.silu_mul_f32.argtypes = [_P, _P, _I, _I, _T]
    for name in ("add_rms_norm_f32", "rotate_half_f32", "silu_mul_f32"):
        getattr(kernels, name).restype = None
    return kernels


def _fits(*tensors: torch.Tensor) -> bool:
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def rms_norm(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
    """``h / rms(h) * weight`` over the last dimension."""
    kernels = _kernels()
    if kernels is None or not _fits(h, weight):
        return None
    out = torch.empty_like(h)
    n = h.shape[-1]
    kernels.add_rms_norm_f32(h.data_ptr(), None, None, weight.data_ptr(), out.data_ptr(), h.numel() // n, n, eps,
                             torch.get_num_threads())  # fmt: skip
    return out


def add_rms_norm(h: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor] | None:  # fmt: skip
    """``(h + delta, rms_norm(h + delta) * weight)``: a residual add and the next norm in one pass."""
    kernels = _kernels()
    if kernels is None or not _fits(h, delta, weight) or h.shape != delta.shape:
        return None
    total, out = torch.empty_like(h), torch.empty_like(h)
    n = h.shape[-1]
    kernels.add_rms_norm_f32(h.data_ptr(), delta.data_ptr(), total.data_ptr(), weight.data_ptr(), out.data_ptr(),
                             h.numel() // n, n, eps, torch.get_num_threads())  # fmt: skip
    return total, out


def rotate_heads_(x: torch.Tensor, heads: int, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Rotate the first ``heads`` heads of ``x`` ``[T, all heads, D]`` in place (q and k of a fused projection) by
    HF's rotate-half with ``cos``/``sin`` ``[T, 1, D]``; False where the kernel cannot (nothing done)."""
    kernels = _kernels()
    if kernels is None or not _fits(x, cos, sin):
        return False
    rows, all_heads, head_dim = x.shape
    kernels.rotate_half_f32(x.data_ptr(), rows, all_heads * head_dim, heads, head_dim, cos.data_ptr(), sin.data_ptr(),
                            torch.get_num_threads())  # fmt: skip
    return True


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor | None:
    """``silu(gate) * up`` of a fused ``[..., gate | up]`` projection."""
    kernels = _kernels()
    if kernels is None or not _fits(gate_up):
        return None
    inter = gate_up.shape[-1] // 2
    out = gate_up.new_empty(*gate_up.shape[:-1], inter)
    kernels.silu_mul_f32(gate_up.data_ptr(), out.data_ptr(), gate_up.numel() // (2 * inter), inter,
                         torch.get_num_threads())  # fmt: skip
    return out
