"""KV-pool kernels: quantized paged storage and the ops that read and write it (installed as ``oxygen_ros.kernels``).

Storage (``quant_spec``): ``KVQuantSpec`` names a format (fp32/fp16/bf16 passthrough, int8 with per token-head
scales, fp8 e4m3 with per-head scales); ``KVBlocks`` holds one layer's K/V blocks ``[num_blocks, block_size, kvh,
head_dim]`` and scales in that format.

Ops, each with a torch reference (``*_torch``, the CPU runtime path) and a Triton kernel (``triton_impl``):

* ``write_kv`` - store new tokens' K/V at flat slots, quantizing on the fly;
* ``paged_decode_attention`` - one query per sequence over its blocks, dequantized in-kernel, GQA, ragged
  lengths, optional per-block attention mass;
* ``gather_kv`` - blocks -> contiguous dequantized K/V (prefill over a cached prefix);
* ``requantize_blocks`` - blocks of one format -> another (tiers, fp8 rescaling);
* ``copy_blocks`` - bitwise block copies with their scales (copy-on-write, moves between pools).

On a CPU, decode attention takes one of two paths, both tested against the kernel and its reference:
``cascade_decode_attention`` (``cascade_decode``), torch ops that read blocks several rows share once
(``SharedPrefix``), and ``cpu_paged_decode`` (``cpu_paged_decode``), C (``cpu/*.c``, built at first use by
``cpu_library``) that reads an fp32 or int8 pool in place.

The C kernels are called through ctypes here only, a wrapper each: ``cpu_paged_decode``, ``cpu_decode_row`` (the
decode tokens of one to eight sequences through a Llama or Gemma decoder stack, ``cpu/llama_decode_row.c``), ``cpu_matvec`` (the products of one to
eight rows) and ``cpu_row_ops`` (a layer's element-wise steps). The structs they pass are declared once, in
``cpu/oxygen_kernels.h``, and mirrored in ``cpu_abi``, whose layout the library must report to be used.

``Fp8Calibrator`` (``calibration``) keeps fp8 scales fitted to recent writes, rescaling stored blocks with them.
``format_support_error`` (``support``) tries a format on a device, so a pool in an unusable format fails at startup.

Dispatch (``dispatch``): the op's ``backend=`` argument, else ``$OXYGEN_KERNELS``, else ``auto``; ``auto`` runs
Triton on CUDA tensors and torch elsewhere, ``triton`` forces the kernel (on CPU: the Triton interpreter, which
needs ``TRITON_INTERPRET=1`` before triton's first import), ``torch`` forces the reference.
"""

from .blocks import copy_blocks, gather_kv, requantize_blocks
from .calibration import Fp8Calibrator
from .cascade_decode import CascadeLayout, LoneRow, SharedPrefix, cascade_decode_attention
from .dispatch import ENV_VAR, use_triton
from .paged_decode import paged_decode_attention
from .quant_spec import KVBlocks, KVQuantSpec
from .support import format_support_error
from .write_kv import write_kv

__all__ = [
    "CascadeLayout",
    "ENV_VAR",
    "Fp8Calibrator",
    "KVBlocks",
    "KVQuantSpec",
    "LoneRow",
    "SharedPrefix",
    "cascade_decode_attention",
    "copy_blocks",
    "format_support_error",
    "gather_kv",
    "paged_decode_attention",
    "requantize_blocks",
    "use_triton",
    "write_kv",
]
