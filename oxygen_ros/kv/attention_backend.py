"""Which attention and kernel paths a pool runs, chosen once (at configure) from ``EngineConfig``.

* ``kernel_backend``: the KV kernels (paged decode, KV writes, gathers, block copies): ``auto`` runs Triton on CUDA
  and torch's references elsewhere, ``torch`` always the references, ``triton`` always Triton (on a CPU: the Triton
  interpreter, which must be chosen before triton is first imported, so it is set here when nothing imported it yet).
* ``cpu_kernels``: the C kernels on a CPU at all (products, decode attention, element-wise steps, the one-call
  decoder); ``cpu_paged_decode``: decode attention by the C kernel reading an fp32 or int8 pool in place (and
  short prefill chunks, over fp32), else shared-prefix attention in torch ops; ``cpu_decode_row``: a decode step of
  up to eight sequences through the whole decoder stack in one C call.

Each has an environment override (``OXYGEN_KERNELS``, ``OXYGEN_CPU_MATVEC=0``, ``OXYGEN_CPU_PAGED_DECODE=0``,
``OXYGEN_CPU_DECODE_ROW=0``), read here once, for tests and benchmarks that compare paths; nothing on the step path
reads the environment.
"""

import os
import sys
from dataclasses import dataclass

import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.kernels import cpu_library
from oxygen_ros.kernels.dispatch import triton_installed

OVERRIDES = {"kernel_backend": "OXYGEN_KERNELS", "cpu_kernels": "OXYGEN_CPU_MATVEC",
             "cpu_paged_decode": "OXYGEN_CPU_PAGED_DECODE", "cpu_decode_row": "OXYGEN_CPU_DECODE_ROW"}  # fmt: skip


@dataclass(frozen=True)
class AttentionBackend:
    kernels: str  # "torch" | "triton": what the KV kernels run as (resolved from auto)
    c_kernels: bool
    c_paged_decode: bool
    decode_row: bool

    @property
    def triton(self) -> bool:
        return self.kernels == "triton"


def choose_backend(config: EngineConfig, device: torch.device) -> AttentionBackend:
    """The paths ``config`` (and an environment override, see the module docstring) selects on ``device``."""
    kernels = os.environ.get(OVERRIDES["kernel_backend"]) or config.kernel_backend
    if kernels == "auto":
        kernels = "triton" if device.type == "cuda" and triton_installed() else "torch"
    elif kernels == "triton" and device.type != "cuda" and "triton" not in sys.modules and \
            not os.environ.get(OVERRIDES["kernel_backend"]):  # fmt: skip
        os.environ["TRITON_INTERPRET"] = "1"  # the interpreter: triton must not be imported before this
    c_kernels = config.cpu_kernels and os.environ.get(OVERRIDES["cpu_kernels"], "1") != "0"
    cpu_library.enable(c_kernels)  # before the model loads: its packed weights ask for the C product
    return AttentionBackend(
        kernels=kernels,
        c_kernels=c_kernels,
        c_paged_decode=c_kernels and config.cpu_paged_decode and os.environ.get(OVERRIDES["cpu_paged_decode"], "1") != "0",
        decode_row=c_kernels and config.cpu_decode_row and os.environ.get(OVERRIDES["cpu_decode_row"], "1") != "0",
    )
