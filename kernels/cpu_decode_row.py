"""The decode tokens of one to eight sequences through a Llama or Gemma decoder stack in one C call
(``cpu/llama_decode_row.c``): the ctypes side.

The kernel's structs (``cpu_abi``) are built once from the layers' weights and the pool's K/V views, and each step
passes only its rows' hidden states, RoPE angles and contexts. Torch tensors in, no model: which model runs it, and
when, is ``oxygen_ros.layers.cpu_decode_row``'s to decide. ``llama_decode_row`` is None where the kernel cannot read the
tensors as they are, and the caller keeps its layer-by-layer path.
"""

import ctypes
import math
from dataclasses import dataclass

import torch

from .cpu_abi import ACT_GELU_TANH, ACT_SILU, I8_GROUP, RowLayer, RowModel, RowStep
from .cpu_library import library
from .cpu_matvec import STREAMED_DTYPES, STREAMED_MAX_INPUTS, WEIGHT_FORMATS, can_stream, weight_shape
from .quant_spec import KVBlocks

MAX_HEAD_DIM = 256  # the kernel keeps a query head in 16 registers
MAX_ROWS = STREAMED_MAX_INPUTS  # its products read the weights once for up to this many rows
ACTIVATIONS = {"silu": ACT_SILU, "gelu_tanh": ACT_GELU_TANH}


@dataclass(frozen=True)
class RowLayerWeights:
    """One decoder layer's weights: fp32 norms and bias, the projections row-major ``[out, in]`` (fused q|k|v, o, fused
    gate|up, down) all in fp32, all in bf16, all in int8 with their fp32 group scales (``cpu_matvec.quantize_int8``),
    or all Q4_1 blocks ``[out, in / 32, 20]`` (``cpu_matvec.quantize_q4_1``)."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    scales: tuple[torch.Tensor, ...] | None = None  # int8: (qkv, o, gate_up, down)'s group scales

    def projections(self) -> tuple[torch.Tensor, ...]:
        return self.qkv, self.o, self.gate_up, self.down


@dataclass(frozen=True)
class RowShape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    activation: str = "silu"  # the gated MLP's: "silu" (SwiGLU) or "gelu_tanh" (Gemma's GeGLU)


class LlamaDecodeRow:
    """The stack over fixed weights and fp32 pool views (one per layer): each call runs the decode tokens of one to
    ``MAX_ROWS`` sequences through every layer, storing their K/V at their slots."""

    def __init__(self, kernels: ctypes.CDLL, shape: RowShape, layers: list[RowLayerWeights],
                 views: list[KVBlocks]) -> None:  # fmt: skip
        self._run, self._scratch_floats = kernels.decode_rows, kernels.decode_rows_scratch
        self._run.argtypes = [ctypes.POINTER(RowModel), ctypes.POINTER(RowLayer), ctypes.POINTER(RowStep), ctypes.c_int]
        self._run.restype = None
        self._scratch_floats.argtypes = [ctypes.POINTER(RowModel), ctypes.c_int64, ctypes.c_int64]
        self._scratch_floats.restype = ctypes.c_int64
        self._keep = [layers, views]  # the pointers below are theirs
        self._model = RowModel(len(layers), shape.hidden, shape.heads, shape.kv_heads, shape.head_dim,
                               shape.intermediate, views[0].block_size, WEIGHT_FORMATS[layers[0].qkv.dtype],
                               ACTIVATIONS[shape.activation], shape.eps, shape.head_dim**-0.5)  # fmt: skip
        self._layers = (RowLayer * len(layers))(*(
            RowLayer(w.input_norm.data_ptr(), 0 if w.qkv_bias is None else w.qkv_bias.data_ptr(),
                     w.post_norm.data_ptr(), *(t.data_ptr() for t in w.projections()), view.k.data_ptr(),
                     view.v.data_ptr(), *(0 if w.scales is None else t.data_ptr() for t in w.scales or (None,) * 4))
            for w, view in zip(layers, views, strict=True)
        ))  # fmt: skip
        self._hidden, self._head_dim = shape.hidden, shape.head_dim
        self._pool_slots = min(view.k.shape[0] * view.k.shape[1] for view in views)  # [units, block_size, ...]
        self._scratch = torch.empty(0)

    def __call__(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, tables: torch.Tensor,
                 lengths: torch.Tensor, slots: torch.Tensor, block_mass: torch.Tensor | None) -> None:  # fmt: skip
        """``h`` [rows, hidden] fp32 contiguous, the tokens' embeddings, becomes the last layer's output; ``cos``/``sin``
        fp32, ``[rows, head_dim]`` values (any shape with rows first) at their positions; ``tables`` int64 ``[rows,
        width]``, each sequence's block ids; ``lengths`` int64 ``[rows]`` its context's tokens including the new one,
        ``slots`` int64 ``[rows]`` the new token's flat pool slot; ``block_mass`` fp32 ``[rows, width]`` (or None) gains
        each block's attention mass, summed over heads and layers. ValueError for tensors the kernel would misread or
        a context or slot outside the pool."""
        rows = h.shape[0]
        want = ((h, (rows, self._hidden), torch.float32), (cos, (rows, self._head_dim), torch.float32),
                (sin, (rows, self._head_dim), torch.float32), (tables, (rows, tables.shape[-1]), torch.int64),
                (lengths, (rows,), torch.int64), (slots, (rows,), torch.int64))  # fmt: skip
        if block_mass is not None:
            want += ((block_mass, tuple(tables.shape), torch.float32),)
        if not 1 <= rows <= MAX_ROWS or any(t.shape[0] != rows or t.numel() != math.prod(shape) or t.dtype != dtype
                                              or not t.is_contiguous() for t, shape, dtype in want):  # fmt: skip
            raise ValueError(f"decode rows: 1 to {MAX_ROWS} rows of contiguous tensors shaped as documented, got "
                             f"{[(tuple(t.shape), t.dtype) for t, _, _ in want]}")  # fmt: skip
        max_length, width = int(lengths.max()), tables.shape[-1]
        block_size = self._model.block_size
        if (int(lengths.min()) < 1 or max_length > width * block_size or int(tables.min()) < 0
                or int(tables.max()) * block_size >= self._pool_slots or int(slots.min()) < 0
                or int(slots.max()) >= self._pool_slots):  # fmt: skip
            raise ValueError(f"decode rows: contexts of {lengths.tolist()} tokens over {width} blocks, blocks and "
                             f"slots outside a pool of {self._pool_slots} slots")  # fmt: skip
        need = self._scratch_floats(ctypes.byref(self._model), rows, max_length)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(max(need, 2 * self._scratch.numel()))
        step = RowStep(h.data_ptr(), cos.data_ptr(), sin.data_ptr(), tables.data_ptr(), lengths.data_ptr(),
                       slots.data_ptr(), 0 if block_mass is None else block_mass.data_ptr(), self._scratch.data_ptr(),
                       rows, width, max_length)  # fmt: skip
        self._run(ctypes.byref(self._model), self._layers, ctypes.byref(step), torch.get_num_threads())


def llama_decode_row(shape: RowShape, layers: list[RowLayerWeights], views: list[KVBlocks]) -> LlamaDecodeRow | None:
    """The one-call stack over ``layers`` and their pool ``views``, or None where the kernels do not run or cannot
    read these tensors."""
    kernels = library()
    if kernels is None:
        return None
    if shape.head_dim % 16 or shape.head_dim > MAX_HEAD_DIM or shape.heads % shape.kv_heads:
        return None
    if shape.activation not in ACTIVATIONS:
        return None
    if not layers or len(views) != len(layers) or any(v.k.dtype != torch.float32 or v.k.device.type != "cpu" for v in views):
        return None
    if any(t is None for w in layers for t in (w.input_norm, w.post_norm, *w.projections())):
        return None  # a layer without its row-major weights (packed without the one-row kernel)
    norms = [t for w in layers for t in (w.input_norm, w.post_norm, w.qkv_bias) if t is not None]
    scales = [t for w in layers for t in w.scales or ()]
    tensors = [*norms, *scales, *(t for w in layers for t in w.projections())]
    if any(t.device.type != "cpu" or not t.is_contiguous() for t in tensors):
        return None
    projections = {t.dtype for w in layers for t in w.projections()}
    if any(t.dtype != torch.float32 for t in norms + scales) or len(projections) != 1 or projections - STREAMED_DTYPES:
        return None
    h, q, kv, inter = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    widths = ((q + 2 * kv, h), (h, q), (2 * inter, h), (h, inter))  # qkv, o, gate_up, down as [out, in]
    if any(not can_stream(p) or weight_shape(p) != want
           for w in layers for p, want in zip(w.projections(), widths, strict=True)):  # fmt: skip
        return None  # rows the kernel would read past (a Q4_1 tensor of another shape, a width the shape does not say)
    int8 = projections == {torch.int8}
    if any((w.scales is not None) != int8 or (int8 and len(w.scales) != 4) for w in layers):
        return None  # int8 rows come with their four scales, other formats with none
    if int8 and any(s.shape != (p.shape[0], -(-p.shape[1] // I8_GROUP))
                    for w in layers for p, s in zip(w.projections(), w.scales, strict=True)):  # fmt: skip
        return None
    return LlamaDecodeRow(kernels, shape, layers, views)
