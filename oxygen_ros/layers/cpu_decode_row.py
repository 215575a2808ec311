"""A batch-1 decode token through the whole decoder stack in one C call (``kernels/cpu/decode_row.c``).

One sequence decoding alone is the robot's common case (one task asking, or the others between their frames), and
there the step is ~40 small torch ops per layer whose dispatch costs as much again as reading the weights. The C
kernel runs every layer of the token (norms, fused products, RoPE, the K/V store, paged attention, SiLU, residuals)
in one OpenMP region, reading the row-major weights the packed layers keep for one-row products and the pool's
blocks in place. It serves a single-format fp32 pool on a CPU with the C kernels built (``kernels.cpu_library``), when
the step builder chose it (``StepContext.row_decode``: ``EngineConfig.cpu_decode_row``); anything else takes the
layer-by-layer path, which stays the reference it is tested against.
"""

import ctypes
from dataclasses import dataclass

import torch

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.kernels.cpu_library import library
from oxygen_ros.layers.cpu_matvec import STREAMED_DTYPES
from oxygen_ros.layers.rotary import RopeAngles

MAX_HEAD_DIM = 256  # the kernel keeps a query head in 16 registers


class _RowLayer(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("input_norm", "qkv_bias", "post_norm", "qkv", "o", "gate_up", "down", "k_cache", "v_cache")]  # fmt: skip


class _RowModel(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in
                ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "block_size", "bf16_weights")]
    _fields_ += [("eps", ctypes.c_float), ("scale", ctypes.c_float)]


class _RowStep(ctypes.Structure):
    _fields_ = [("h", ctypes.c_void_p), ("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p),
                ("table", ctypes.c_void_p), ("length", ctypes.c_int64), ("slot", ctypes.c_int64),
                ("block_mass", ctypes.c_void_p), ("scratch", ctypes.c_void_p)]  # fmt: skip


@dataclass(frozen=True)
class RowLayerWeights:
    """One decoder layer's weights: fp32 norms and bias, the projections row-major ``[out, in]`` (fused q|k|v, o, fused
    gate|up, down) in fp32 or all in bf16."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


@dataclass(frozen=True)
class RowShape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float


class RowDecoder:
    """Runs one decode token of one sequence through every layer, writing its K/V into ``kv``."""

    def __init__(self, function, scratch_floats, shape: RowShape, layers: list[RowLayerWeights], kv: KVCache) -> None:
        self._function, self._scratch_floats = function, scratch_floats
        self._keep = [layers, kv]  # the pointers below are theirs
        views = [layer.views[0] for layer in kv.layers]
        bf16 = layers[0].qkv.dtype == torch.bfloat16
        self._model = _RowModel(len(layers), shape.hidden, shape.heads, shape.kv_heads, shape.head_dim,
                                shape.intermediate, kv.layout.block_size, bf16, shape.eps, shape.head_dim**-0.5)  # fmt: skip
        self._layers = (_RowLayer * len(layers))(*(
            _RowLayer(w.input_norm.data_ptr(), 0 if w.qkv_bias is None else w.qkv_bias.data_ptr(),
                      w.post_norm.data_ptr(), w.qkv.data_ptr(), w.o.data_ptr(), w.gate_up.data_ptr(),
                      w.down.data_ptr(), view.k.data_ptr(), view.v.data_ptr())
            for w, view in zip(layers, views, strict=True)
        ))  # fmt: skip
        self._scratch = torch.empty(0)

    def __call__(self, h: torch.Tensor, rope: RopeAngles, ctx: StepContext) -> None:
        """``h`` [1, hidden] fp32 contiguous, the token's embedding, becomes the last layer's output."""
        length = ctx.context_lens[0]
        need = self._scratch_floats(ctypes.byref(self._model), length)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(max(need, 2 * self._scratch.numel()))
        mass = ctx.block_mass
        step = _RowStep(h.data_ptr(), rope.cos.data_ptr(), rope.sin.data_ptr(), ctx.block_tables.data_ptr(), length,
                        ctx.slots[0], 0 if mass is None else mass.data_ptr(), self._scratch.data_ptr())  # fmt: skip
        self._function(ctypes.byref(self._model), self._layers, ctypes.byref(step), torch.get_num_threads())


def row_decoder(shape: RowShape, layers: list[RowLayerWeights], kv: KVCache) -> RowDecoder | None:
    """The one-call decoder over ``kv``, or None where it does not apply (then decode layer by layer)."""
    kernels = library()
    if kernels is None or not kv.backend.decode_row or kv.pool_layout.mixed:
        return None
    if shape.head_dim % 16 or shape.head_dim > MAX_HEAD_DIM or shape.heads % shape.kv_heads:
        return None
    views = [layer.views[0] for layer in kv.layers]
    if len(views) != len(layers) or any(v.k.dtype != torch.float32 or v.k.device.type != "cpu" for v in views):
        return None
    if any(t is None for w in layers for name, t in vars(w).items() if name != "qkv_bias"):
        return None  # a layer without its row-major weights (packed without the one-row kernel)
    tensors = [t for w in layers for t in vars(w).values() if t is not None]
    if any(t.device.type != "cpu" or not t.is_contiguous() for t in tensors):
        return None
    norms = [t for w in layers for t in (w.input_norm, w.post_norm, w.qkv_bias) if t is not None]
    projections = {t.dtype for w in layers for t in (w.qkv, w.o, w.gate_up, w.down)}
    if any(t.dtype != torch.float32 for t in norms) or len(projections) != 1 or projections - STREAMED_DTYPES:
        return None
    function = kernels.decode_row
    function.argtypes = [ctypes.POINTER(_RowModel), ctypes.POINTER(_RowLayer), ctypes.POINTER(_RowStep), ctypes.c_int]
    function.restype = None
    scratch = kernels.decode_row_scratch
    scratch.argtypes, scratch.restype = [ctypes.POINTER(_RowModel), ctypes.c_int64], ctypes.c_int64
    return RowDecoder(function, scratch, shape, layers, kv)
