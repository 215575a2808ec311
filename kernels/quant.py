"""Element-wise (de)quantization in torch: the numerics every torch reference shares and the Triton kernels match.

All math runs in fp32 with correctly rounded operations (divisions are tensor / tensor: torch computes
``scalar / t`` and, on CUDA, ``t / scalar`` through a reciprocal).  Rounding is spelled out so the Triton side
reproduces it bit for bit:

* int8 value codes are ``floor(x * (127 / absmax) + 0.5)`` (round half up) and the scale is ``absmax / 127``, with
  absmax floored at ``INT8_MIN_ABSMAX`` so all-zero rows need no special case;
* int8 key codes are ``floor(x / scale + 0.5)`` clamped to +-127, with ``scale`` the bf16 rounding (to nearest even)
  of ``absmax / 127`` over the block's tokens per channel;
* fp8 codes are torch's own fp32 -> float8_e4m3fn conversion (round to nearest even) of ``clamp(x / scale, +-448)``.
"""

from dataclasses import dataclass

import torch

from .quant_spec import FP8_MAX, INT8_MAX, INT8_MIN_ABSMAX, KEY_SCALE_DTYPE, KVQuantSpec


def dequantize(codes: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """Codes ``[..., kvh, d]`` -> fp32 values.

    ``scale`` is None (float storage), of codes' rank (int8 keys: per block and channel, size 1 on the token axis),
    per token-head ``[..., kvh]`` (int8 values) or per head ``[kvh]`` (fp8).
    """
    values = codes.float()
    if scale is None:
        return values
    return values * (scale.float() if scale.dim() == codes.dim() else scale.unsqueeze(-1))


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


def quantize_channels(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole blocks ``[n, block_size, kvh, d]`` -> (int8 codes, bf16 scales ``[n, 1, kvh, d]``): one scale per
    (block, kv-head, channel) from the absmax over the block's tokens (zero rows, e.g. past a partial block's last
    token, do not move it)."""
    absmax = values.abs().amax(dim=1, keepdim=True).clamp_min_(INT8_MIN_ABSMAX)
    scale = (absmax / torch.full_like(absmax, INT8_MAX)).to(KEY_SCALE_DTYPE)
    codes = torch.floor(values / scale.float() + 0.5).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return codes, scale


def store_quantized(data: torch.Tensor, scale: torch.Tensor | None, index: torch.Tensor, x: torch.Tensor) -> None:
    """``data[index] = quantize(x)`` in data's format; int8 writes its scales to ``scale[index]``, fp8 reads its
    per-head scales from ``scale``. With per-channel (key) scales ``x`` is whole blocks."""
    if scale is not None and scale.dim() == data.dim():
        codes, new_scale = quantize_channels(x.float())
    else:
        codes, new_scale = quantize(x, data.dtype, scale)
    # whole rows (advanced-index assignment copies element by element on a CPU), as bytes for one-byte formats
    # (fp8 has no index_copy_ on a CPU)
    _as_bits(data).index_copy_(0, index, _as_bits(codes))
    if new_scale is not None:
        scale.index_copy_(0, index, new_scale)


@dataclass(frozen=True)
class BlockFills:
    """Which int8 key blocks a write fills, built once per step from the host slots (``of``) so that the layers
    only index: the blocks, each stored token's block (position in ``blocks``) and offset, and each block's tokens
    that were there before (the block's first ``min(offset)``)."""

    blocks: torch.Tensor  # [n] int64
    which: torch.Tensor  # [T] int64
    offsets: torch.Tensor  # [T] int64
    kept: torch.Tensor  # [n, block_size] bool

    @classmethod
    def of(cls, slots: list[int], block_size: int, device: torch.device) -> "BlockFills":
        """From the stored tokens' slots (all >= 0)."""
        first: dict[int, int] = {}
        for slot in slots:
            block, offset = divmod(slot, block_size)
            first[block] = min(first.get(block, offset), offset)
        position = {block: i for i, block in enumerate(first)}
        which = [position[slot // block_size] for slot in slots]
        kept = [[offset < start for offset in range(block_size)] for start in first.values()]
        return cls(torch.tensor(list(first), dtype=torch.long, device=device),
                   torch.tensor(which, dtype=torch.long, device=device),
                   torch.tensor([slot % block_size for slot in slots], dtype=torch.long, device=device),
                   torch.tensor(kept, dtype=torch.bool, device=device).view(len(first), block_size))  # fmt: skip


def store_channel_tokens(data: torch.Tensor, scale: torch.Tensor, fills: BlockFills, x: torch.Tensor) -> None:
    """Store tokens ``x`` ``[T, kvh, d]`` in int8 key blocks ``data`` ``[n, bs, kvh, d]`` with per-channel ``scale``
    ``[n, 1, kvh, d]`` as ``fills`` says: each block written to is requantized as a whole, the tokens it held before
    kept at their values, the rest zero.

    The tokens written to one block are the block's next ones (a sequence fills its last block in order; a block at
    offset 0 is new), so the scales grow with the block over its own tokens only; a key already stored is rounded
    again when its channel's scale grows (off by at most half of each scale it was rounded to).
    """
    values = dequantize(take_rows(data, fills.blocks), take_rows(scale, fills.blocks))
    values = torch.where(fills.kept[:, :, None, None], values, 0.0)
    values[fills.which, fills.offsets] = x.float()
    store_quantized(data, scale, fills.blocks, values)


def _as_bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8) if x.element_size() == 1 else x


def take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[index]`` for an integer ``index`` of any shape, by ``index_select``: on a CPU that copies whole rows, where
    advanced indexing copies element by element (17x slower for a decode step's K/V blocks)."""
    return x.index_select(0, index.reshape(-1)).view(*index.shape, *x.shape[1:])


def select_scale(scale: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    """The scales that go with ``codes[index]``: per-token and per-block scales are indexed alike, per-head ones are
    shared."""
    if scale is None or scale.dim() == 1:
        return scale
    return take_rows(scale, index)
