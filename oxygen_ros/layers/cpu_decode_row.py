"""A batch-1 decode token through the whole decoder stack in one C call (``kernels.cpu_decode_row``), for a model.

One sequence decoding alone is the robot's common case (one task asking, or the others between their frames), and
there the step is ~40 small torch ops per layer whose dispatch costs as much again as reading the weights. The C
kernel runs every layer of the token (norms, fused products, RoPE, the K/V store, paged attention, SiLU, residuals)
in one OpenMP region, reading the row-major weights the packed layers keep for one-row products and the pool's
blocks in place. It serves a single-format fp32 pool on a CPU with the C kernels built (``kernels.cpu_library``), when
the step builder chose it (``StepContext.row_decode``: ``EngineConfig.cpu_decode_row``); anything else takes the
layer-by-layer path, which stays the reference it is tested against.
"""

import torch

from oxygen_ros.kernels.cpu_decode_row import LlamaDecodeRow, RowLayerWeights, RowShape, llama_decode_row
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.layers.rotary import RopeAngles


class RowDecoder:
    """Runs one decode token of one sequence through every layer, writing its K/V into the pool."""

    def __init__(self, stack: LlamaDecodeRow) -> None:
        self._stack = stack

    def __call__(self, h: torch.Tensor, rope: RopeAngles, ctx: StepContext) -> None:
        """``h`` [1, hidden] fp32 contiguous, the token's embedding, becomes the last layer's output."""
        self._stack(h, rope.cos, rope.sin, ctx.block_tables, ctx.context_lens[0], ctx.slots[0], ctx.block_mass)


def row_decoder(shape: RowShape, layers: list[RowLayerWeights], kv: KVCache) -> RowDecoder | None:
    """The one-call decoder over ``kv``, or None where it does not apply (then decode layer by layer)."""
    if not kv.backend.decode_row or kv.pool_layout.mixed:
        return None
    stack = llama_decode_row(shape, layers, [layer.views[0] for layer in kv.layers])
    return None if stack is None else RowDecoder(stack)
