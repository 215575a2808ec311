"""Element-wise (de)quantization in torch: the numerics every torch reference shares and the Triton kernels match.

All math runs in fp32 with correctly rounded operations (divisions are tensor / tensor: torch computes
``scalar / t`` and, on CUDA, ``t / scalar`` through a reciprocal).  Rounding is spelled out so the Triton side
reproduces it bit for bit:

* int8 codes are ``floor(x * (127 / absmax) + 0.5)`` (round half up) and the scale is ``absmax / 127``, with absmax
  floored at ``INT8_MIN_ABSMAX`` so all-zero rows need no special case;
* fp8 codes are torch's own fp32 -> float8_e4m3fn conversion (round to nearest even) of ``clamp(x / scale, +-448)``.
"""

import torch

from .quant_spec import FP8_MAX, INT8_MAX, INT8_MIN_ABSMAX, KVQuantSpec


def dequantize(codes: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """Codes ``[..., kvh, d]`` -> fp32 values.

    ``scale`` is None (float storage), per token-head ``[..., kvh]`` (int8) or per head ``[kvh]`` (fp8): one
    broadcast serves both scaled kinds.
    """
    values = codes.float()
    return values if scale is None else values * scale.unsqueeze(-1)


def quantize(
    x: torch.Tensor, dtype: torch.dtype, head_scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Values ``[..., kvh, d]`` -> (codes in ``dtype``, per token-head scales ``[..., kvh]`` for int8 else None).

    ``head_scale`` ``[kvh]`` is the fp8 per-head scale; the other kinds ignore it.
    """
    kind = KVQuantSpec(dtype).kind
    if kind == "none":
        return x.to(dtype), None
    x = x.float()
    if kind == "int8":
        absmax = x.abs().amax(dim=-1).clamp_min_(INT8_MIN_ABSMAX)
        int8_max = torch.full_like(absmax, INT8_MAX)  # tensor / tensor: torch turns scalar operands into reciprocals
        codes = torch.floor(x * (int8_max / absmax).unsqueeze(-1) + 0.5).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
        return codes, absmax / int8_max
    if head_scale is None:
        raise ValueError("fp8 quantization needs the per-head scale")
    return (x / head_scale.unsqueeze(-1)).clamp_(-FP8_MAX, FP8_MAX).to(dtype), None


def store_quantized(data: torch.Tensor, scale: torch.Tensor | None, index: torch.Tensor, x: torch.Tensor) -> None:
    """``data[index] = quantize(x)`` in data's format; int8 writes the token-head scales to ``scale[index]``, fp8
    reads its per-head scales from ``scale``."""
    codes, token_scale = quantize(x, data.dtype, scale)
    # whole rows (advanced-index assignment copies element by element on a CPU), as bytes for one-byte formats
    # (fp8 has no index_copy_ on a CPU)
    _as_bits(data).index_copy_(0, index, _as_bits(codes))
    if token_scale is not None:
        scale.index_copy_(0, index, token_scale)


def _as_bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8) if x.element_size() == 1 else x


def take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[index]`` for an integer ``index`` of any shape, by ``index_select``: on a CPU that copies whole rows, where
    advanced indexing copies element by element (17x slower for a decode step's K/V blocks)."""
    return x.index_select(0, index.reshape(-1)).view(*index.shape, *x.shape[1:])


def select_scale(scale: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    """The scales that go with ``codes[index]``: per-token scales are indexed alike, per-head ones are shared."""
    if scale is None or scale.dim() == 1:
        return scale
    return take_rows(scale, index)
