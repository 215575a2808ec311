"""Which implementation runs an op: compiled Triton on CUDA, the torch reference elsewhere, Triton on CPU if forced.

The choice, per call: the op's ``backend`` argument, else the ``OXYGEN_KERNELS`` environment variable, else
``"auto"``.  ``"auto"`` picks Triton when the tensors are on CUDA and triton is installed, torch otherwise;
``"torch"`` always runs the reference; ``"triton"`` always runs the Triton kernel, which on CPU tensors means the
Triton interpreter.

The interpreter has to be chosen before triton is first imported: ``import triton`` decorates triton.language's own
helpers (``tl.zeros``, ``tl.sum``...) for the interpreter or for the compiler once, from ``TRITON_INTERPRET``.  This
package therefore imports triton only when a Triton kernel is first launched, and refuses CPU launches with a clear
message when triton was imported without the interpreter.
"""

import importlib.util
import os
from functools import cache
from typing import Literal

import torch

ENV_VAR = "OXYGEN_KERNELS"
Backend = Literal["auto", "torch", "triton"]
_CHOICES = ("auto", "torch", "triton")


@cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def use_triton(device: torch.device, backend: Backend | None = None) -> bool:
    """True when an op on tensors of ``device`` should run its Triton kernel (see the module docstring)."""
    choice = backend or os.environ.get(ENV_VAR) or "auto"
    if choice not in _CHOICES:
        raise ValueError(f"kernel backend {choice!r} (argument or ${ENV_VAR}) is not one of {_CHOICES}")
    if choice == "torch":
        return False
    if choice == "auto":
        return device.type == "cuda" and triton_installed()
    if not triton_installed():
        raise RuntimeError("the triton kernel backend was requested but triton is not installed")
    if device.type != "cuda" and not _interpreter_active():
        raise RuntimeError(
            "Triton kernels on CPU tensors run only under the Triton interpreter: set TRITON_INTERPRET=1 in the "
            "environment before triton is first imported (tests: test/kernels/conftest.py does it)"
        )
    return True


def _interpreter_active() -> bool:
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.zeros, InterpretedFunction)
