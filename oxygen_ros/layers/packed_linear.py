"""Linear layers whose weights oneDNN has reordered into the blocked layout it reads fastest on this CPU.

A decode step is a sequence of matrix-vector products over every weight, so its speed is the speed weights stream
through the cores.  torch's default fp32 ``F.linear`` on a weight stored row-major reads about 11 GB/s here (batch 1,
two threads); the same product on a weight oneDNN has prepacked reads about twice that, and at batch 8-32 it is also
twice as fast (``bench --suite peers`` measures both against the machine's read bandwidth).  Packing is done once
after loading, replaces the ``nn.Linear``, and changes only the order of fp32 additions: the
engine's token-for-token tests against transformers run on packed weights.

Up to eight rows (decode steps of up to eight sequences, batch 1 among them) go to ``cpu_matvec`` instead where it
runs: it reads the weight at nearly the machine's DRAM rate, where oneDNN's small-batch products read it at half.
That needs the row-major weight as well, so a packed layer keeps both (for a tied LM head the embedding table is that
copy already): on a CPU the weights take twice their size, ~1 GB for SmolLM2-135M, for ~1.3-2x faster decode steps
of one to eight sequences (int8 weights: the fp32 packed copy plus int8 rows, 1.25x fp32's size).

With ``weight_dtype=torch.bfloat16`` under fp32 compute (``weight_dtype: bfloat16``) a layer stores its weight as bf16:
half the bytes to stream, and oneDNN's bf16 products (AVX512-BF16) run ~1.6-2x faster than fp32 ones here. Each
input is rounded to bf16 on the way in and the sums run in fp32, but oneDNN hands the output back in bf16 (rounded)
before it is widened to fp32; up to eight rows instead stream the bf16 rows into fp32 products (``cpu_matvec``):
exact up to fp32 sums. Lossy (bf16 keeps 8 bits of mantissa): an option whose quality
``bench --suite peers`` measures, never the reference path.

With ``weight_dtype=torch.int8`` (``weight_dtype: int8``) the weight is quantized in groups of 32 along each row
(``quantize_int8``): up to eight rows stream the int8 rows (0.28 of fp32's bytes: batch-1 decode reads that much less),
and more rows run oneDNN's fp32 product over the very values the int8 rows stand for (integer times its group's
scale), so a request gets the same weights whatever its batch: only fp32 sums differ, and a product of one row reads
that row as int16 codes per group of 32 (integer products, ~1.15x faster at batch 1; the codes are within 1/65534 of
each group's largest input, and the peers suite's int8 scores did not move). Lossy like bf16, measured the same way.

With ``weight_dtype=Q4_1`` (``weight_dtype: q4_1``) the rows are GGUF Q4_1 blocks (``quantize_q4_1``: 0.625 bytes a
weight), more rows again oneDNN's fp32 product over the values they stand for. Over a Q4_1 GGUF's tensors (the
bundled SmolLM2) the blocks are the file's own and their values the fp32 weights the loader gave, and over a Q4_0
GGUF's they stand for its values exactly (its blocks as Q4_1, m = -8d): lossless there, lossy on weights that were
never 4-bit.
"""

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_ros.kernels.cpu_matvec import (
    Q4_1,
    STREAMED_MAX_INPUTS,
    can_stream,
    dequantize_int8,
    dequantize_q4_1,
    matvec_kernel,
    quantize_int8,
    quantize_q4_1,
    weight_format_name,
)

BATCH_HINT = 32  # rows oneDNN tunes the layout for; measured as good from 1 to 512 rows


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether weights of ``dtype`` can be packed and multiplied here: fp32 on a CPU with oneDNN; bf16 where oneDNN
    also computes bf16 products (AVX-512 at least)."""
    packs = (device.type == "cpu" and torch.backends.mkldnn.is_available()
             and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))  # fmt: skip
    if dtype == torch.bfloat16:
        return packs and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return packs and dtype == torch.float32


def can_pack_bf16(device: torch.device) -> bool:
    """Whether bf16 weights can be packed and multiplied here."""
    return can_pack(device, torch.bfloat16)


class PackedLinear(nn.Module):
    """``x @ weight.T + bias`` with a prepacked weight (inference only: the weight is no parameter).  ``weight_dtype``
    is the stored format when it differs from the weight's (bf16, int8 or Q4_1 under fp32 compute); the bias stays as
    given. int8 and Q4_1 need the C product (``matvec_kernel()``; the model loader checks it)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, weight_dtype: torch.dtype | None = None,
                 in_place: bool = False) -> None:  # fmt: skip
        """``in_place``: no oneDNN copy; the weight itself is read, by the C product for up to eight rows and by
        torch's otherwise (a tied LM head over a large vocabulary, whose copy would cost its size again)."""
        super().__init__()
        if in_place and weight_dtype not in (None, weight.dtype):
            raise ValueError("a weight read in place keeps its dtype")
        self.out_features, self.in_features = weight.shape
        self.scales: torch.Tensor | None = None  # int8 rows' group scales
        if weight_dtype == torch.int8:
            stored, self.scales = quantize_int8(weight)
            packed = dequantize_int8(stored, self.scales)  # what the int8 rows stand for, for oneDNN's product
        elif weight_dtype == Q4_1:
            stored = quantize_q4_1(weight)
            packed = dequantize_q4_1(stored)  # what the blocks stand for, for oneDNN's product
        else:
            stored = packed = weight.detach().to(weight_dtype or weight.dtype).contiguous()
        self.packed = None if in_place else torch.ops.mkldnn._reorder_linear_weight(packed, BATCH_HINT)
        self.stored_dtype = packed.dtype
        self.bias = None if bias is None else bias.detach()
        streams = weight.dtype == torch.float32 and can_stream(stored)  # fp32 compute over fp32, bf16, int8, Q4_1 rows
        self.matvec = matvec_kernel() if streams else None
        if weight_dtype in (torch.int8, Q4_1) and self.matvec is None:
            raise ValueError(f"{weight_format_name(weight_dtype)} weights need the CPU C kernels (kernels/cpu_library.py)")
        # row-major, for products of up to eight rows (and any product, read in place)
        self.rows = stored if self.matvec is not None or in_place else None

    @property
    def streamed_bytes(self) -> int:
        """The weight bytes a product of up to eight rows reads: its row-major rows and their scales where it streams
        them, else the packed weight."""
        if self.rows is None:
            return self.out_features * self.in_features * self.stored_dtype.itemsize
        return self.rows.numel() * self.rows.element_size() + (0 if self.scales is None else 4 * self.scales.numel())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if (self.matvec is not None and 1 <= flat.shape[0] <= STREAMED_MAX_INPUTS and flat.dtype == torch.float32
                and flat.is_contiguous()):  # fmt: skip
            out = self.matvec(self.rows, flat, self.scales)
            if self.bias is not None:
                out += self.bias
        elif self.packed is None:  # read in place
            out = F.linear(flat, self.rows, self.bias)
        elif flat.dtype == self.stored_dtype:
            out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        else:  # bf16 weights under fp32 compute: bf16 in, fp32 sums, fp32 out
            out = torch.ops.mkldnn._linear_pointwise(flat.to(self.stored_dtype), self.packed, None, "none", [], "")
            out = out.to(flat.dtype)
            if self.bias is not None:
                out += self.bias
        return out.view(*x.shape[:-1], self.out_features)


def pack_linears(module: nn.Module, weight_dtype: torch.dtype | None = None) -> None:
    """Replace every ``nn.Linear`` below ``module`` by a ``PackedLinear`` of the same weights (stored as
    ``weight_dtype`` when given)."""
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, PackedLinear(child.weight, child.bias, weight_dtype))
        else:
            pack_linears(child, weight_dtype)


def pack_decoder_layers(layers: nn.ModuleList, weight_dtype: torch.dtype | None = None) -> None:
    """A decoder's layers as the CPU reads them fastest: each layer's q/k/v and gate/up fused (its ``self_attn`` and
    ``mlp``), then every ``nn.Linear`` below them packed (stored as ``weight_dtype`` when given). Llama's and Gemma's
    (pi0 / pi0.5) layers alike, after loading; a second call finds nothing left to fuse or pack."""
    for layer in layers:
        layer.self_attn.fuse_projections()
        layer.mlp.fuse_projections()
    pack_linears(layers, weight_dtype)
