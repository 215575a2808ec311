"""How far each KV plane's stored values are from the computed ones, per format, on SmolLM2's real K/V of the text.

The int8 gates ask int8 KV to disturb the next-token distributions no more than bf16 KV does.  bf16 keeps 8
significant bits of every value whatever its size; an int8 code keeps 8 bits of its group's range, so the error
of a small value is the group's step, not its own.  This measures, per plane (keys, values): the relative error
``sum((x - stored)^2) / sum(x^2)`` of bf16, of the shipped int8 layout (through ``kernels.quant``'s own
quantizers), of int8 under the other grouping, and the fewest bits a symmetric uniform code in the shipped
grouping needs to be within bf16's error (``<plane>_bits_to_match_bf16``).  At <= 0.57x fp16's bytes a format has
9.12 bits per value for its codes and scales together.
"""

from collections.abc import Callable

import torch

from oxygen_ros.bench.quant_text import text_in_pool
from oxygen_ros.engine.engine import Engine
from oxygen_ros.kernels.quant import dequantize, quantize, quantize_channels

BITS = range(8, 17)  # the code widths tried for bits_to_match_bf16
PER_CHANNEL = (1,)  # ``[blocks, tokens, heads, dim]``: one scale per (block, head, channel) over the block's tokens
PER_TOKEN = (-1,)  # one scale per (token, head) over the channels


def text_kv(engine: Engine, ids: list[int], chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The K and V a full-precision ``engine`` stores for the text, whole blocks only, as fp32
    ``[layers * blocks, block_size, kv_heads, head_dim]``; the model must compute in fp32 too (the suite measures
    this only where it does, on a CPU)."""
    if engine.kv.pool_layout.mixed or engine.kv.layers[0].blocks.k.dtype != torch.float32:
        raise ValueError(f"the reference K/V must be stored at fp32, not {engine.layout.name}")
    with text_in_pool(engine, ids, chunk) as (blocks, _):
        whole = torch.tensor(blocks[: (len(ids) - 1) // engine.config.block_size])  # the last token is never stored
        k, v = (torch.cat([getattr(layer.blocks, plane)[whole] for layer in engine.kv.layers]) for plane in "kv")
    return k, v


def relative_error(x: torch.Tensor, stored: torch.Tensor) -> float:
    return float((x - stored).pow(2).sum() / x.pow(2).sum())


def uniform_code(
    x: torch.Tensor, bits: int, dims: tuple[int, ...], scale: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> torch.Tensor:
    """``x`` through a symmetric ``bits``-wide code with one scale per group, the absmax over ``dims``: exact, or
    as stored through ``scale`` (e.g. rounded to fp8), with codes clamped to the range."""
    levels = 2 ** (bits - 1) - 1
    step = x.abs().amax(dim=dims, keepdim=True).clamp_min(1e-30) / levels
    step = step if scale is None else scale(step)
    return torch.round(x / step).clamp(-levels, levels) * step


def int8_as_stored(x: torch.Tensor, per_channel: bool) -> torch.Tensor:
    """``x`` (whole blocks) quantized and read back as the int8 pool does: bf16 scales per channel over a block
    (keys), or fp32 scales per token and head (values)."""
    if per_channel:
        return dequantize(*quantize_channels(x))
    codes, scale = quantize(x, torch.int8)
    return dequantize(codes, scale)


def distortion(k: torch.Tensor, v: torch.Tensor) -> dict[str, float | int | None]:
    """Per plane: bf16's and fp16's relative error, int8's as shipped (keys per channel, values per token) and
    in the other grouping, and the fewest bits a uniform code in the shipped grouping needs to be within bf16's."""
    metrics: dict[str, float | int | None] = {}
    for plane, x, per_channel in (("k", k, True), ("v", v, False)):
        grouping = PER_CHANNEL if per_channel else PER_TOKEN
        bf16 = relative_error(x, x.bfloat16().float())
        metrics |= {
            f"{plane}_bf16_rel_error": bf16,
            f"{plane}_fp16_rel_error": relative_error(x, x.half().float()),
            f"{plane}_int8_rel_error": relative_error(x, int8_as_stored(x, per_channel)),
            f"{plane}_int8_{'per_token' if per_channel else 'per_channel'}_rel_error":
                relative_error(x, int8_as_stored(x, not per_channel)),
            f"{plane}_bits_to_match_bf16":
                next((b for b in BITS if relative_error(x, uniform_code(x, b, grouping)) <= bf16), None),
        }  # fmt: skip
    return metrics
