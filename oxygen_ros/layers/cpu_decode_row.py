"""The decode tokens of one to eight sequences through the whole decoder stack in one C call
(``kernels.cpu_decode_row``), for a model.

One sequence decoding alone is the robot's common case (one task asking, or the others between their frames), and a
few concurrent tasks' language rows the next; there a step is ~40 small torch ops per layer whose dispatch costs as
much again as reading the weights. The C kernel runs every layer of the step (norms, fused products read once for
all rows, RoPE, the K/V stores, each row's paged attention, SiLU or GELU, residuals) in one OpenMP region, reading the
row-major weights the packed layers keep for few-row products and the pool's blocks in place. It serves a
single-format fp32 pool on a CPU with the C kernels built (``kernels.cpu_library``), when the step builder chose it
(``StepContext.row_decode``: ``EngineConfig.cpu_decode_row``); anything else takes the layer-by-layer path, which
stays the reference it is tested against. Llama's layers (SwiGLU) and Gemma's (pi0 / pi0.5's backbone: GeGLU,
RMSNorm scaled by 1 + w) run through it alike (``stack_row_decoder``).
"""

import weakref
from collections.abc import Callable, Sequence

import torch
from torch import nn

from oxygen_ros.kernels.cpu_decode_row import LlamaDecodeRow, RowLayerWeights, RowShape, llama_decode_row
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.layers.rotary import RopeAngles


class RowDecoder:
    """Runs a decode step's tokens (one per sequence) through every layer, writing their K/V into the pool."""

    def __init__(self, stack: LlamaDecodeRow) -> None:
        self._stack = stack

    def __call__(self, h: torch.Tensor, rope: RopeAngles, ctx: StepContext) -> None:
        """``h`` [rows, hidden] fp32 contiguous, the tokens' embeddings, becomes the last layer's output."""
        self._stack(h, rope.cos, rope.sin, ctx.block_tables, ctx.context_lens_tensor, ctx.slot_mapping, ctx.block_mass)


def row_decoder(shape: RowShape, layers: list[RowLayerWeights], kv: KVCache) -> RowDecoder | None:
    """The one-call decoder over ``kv``, or None where it does not apply (then decode layer by layer)."""
    if not kv.backend.decode_row or kv.pool_layout.mixed:
        return None
    stack = llama_decode_row(shape, layers, [layer.views[0] for layer in kv.layers])
    return None if stack is None else RowDecoder(stack)


def stack_row_decoder(layers: Sequence[nn.Module], shape: RowShape, kv: KVCache,
                      norm_offset: float = 0.0) -> RowDecoder | None:  # fmt: skip
    """The one-call decoder over decoder ``layers`` (each a ``self_attn`` with packed ``qkv_proj`` / ``o_proj``, an
    ``mlp`` with packed ``gate_up_proj`` / ``down_proj``, and RMSNorms with a weight: ``w``, or Gemma's ``1 + w`` with
    ``norm_offset`` 1) and ``kv``; None where a layer is not packed for it or has norms it does not have."""
    norms = [n for layer in layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
    projections = [p for layer in layers for p in _projections(layer)]
    if any(getattr(n, "weight", None) is None for n in norms) or any(getattr(p, "rows", None) is None
                                                                      for p in projections):  # fmt: skip
        return None

    def norm(n: nn.Module) -> torch.Tensor:
        return n.weight.detach() if norm_offset == 0 else n.weight.detach().float() + norm_offset

    weights = [
        RowLayerWeights(norm(layer.input_layernorm), layer.self_attn.qkv_proj.rows, layer.self_attn.qkv_proj.bias,
                        layer.self_attn.o_proj.rows, norm(layer.post_attention_layernorm),
                        layer.mlp.gate_up_proj.rows, layer.mlp.down_proj.rows, _scales(layer))
        for layer in layers
    ]  # fmt: skip
    return row_decoder(shape, weights, kv)


class RowDecoderCache:
    """A model's one-call decoder, built once per pool (the pool's K/V views are part of it), and where it runs."""

    def __init__(self) -> None:
        self._built: tuple[weakref.ref, RowDecoder | None] | None = None

    def get(self, kv: KVCache, build: Callable[[], RowDecoder | None]) -> RowDecoder | None:
        built = self._built
        if built is None or built[0]() is not kv:
            built = self._built = (weakref.ref(kv), build())
        return built[1]

    def decode(self, h: torch.Tensor, owned: bool, rope: RopeAngles, ctx: StepContext, kv: KVCache,
               build: Callable[[], RowDecoder | None]) -> torch.Tensor | None:  # fmt: skip
        """The stack's output for the step's embeddings ``h`` in one C call, where the step builder chose it and the
        model has the decoder (``build``); None: run the layers. ``owned``: ``h`` is this step's own tensor, updated
        in place (else a copy is)."""
        if not ctx.row_decode or h.dtype != torch.float32:
            return None
        row = self.get(kv, build)
        if row is None:
            return None
        h = h.contiguous() if owned else h.clone()
        row(h, rope, ctx)
        return h


def _projections(layer: nn.Module) -> tuple[nn.Module | None, ...]:
    attn, mlp = layer.self_attn, layer.mlp
    return attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj


def _scales(layer: nn.Module) -> tuple[torch.Tensor, ...] | None:
    """The int8 group scales of a packed layer's (qkv, o, gate_up, down), or None for other formats."""
    scales = tuple(p.scales for p in _projections(layer))
    return None if any(s is None for s in scales) else scales
