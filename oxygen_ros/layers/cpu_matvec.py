"""A matrix-vector product that reads fp32 weights at the DRAM rate: the batch-1 decode step on a CPU.

A decode step of one sequence multiplies every weight once by one vector, so its time is the time the weights take
to stream in. oneDNN's fp32 product reads them at about half the rate a plain sum over the same bytes does here (18-22
vs 33-38 GB/s, two threads); ``cpu_matvec.c``, eight rows per AVX-512 register block, reads them at ~93% of it. It is
plain C with no torch headers, so gcc builds it in half a second, once per machine (cached by source, compiler and
flags under ``~/.cache/oxygen_ros/kernels``), and ctypes calls it with the tensors' pointers. Where there is no
AVX-512, no C compiler or ``OXYGEN_CPU_MATVEC=0``, ``matvec_kernel()`` is None and callers keep oneDNN.
"""

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("cpu_matvec.c")
FLAGS = ("-O3", "-mavx512f", "-mfma", "-fopenmp", "-shared", "-fPIC")
ENV_VAR = "OXYGEN_CPU_MATVEC"  # 0 = never use it (measure oneDNN alone)
Matvec = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
log = logging.getLogger(__name__)


@cache
def matvec_kernel() -> Matvec | None:
    """``matvec(weight [n, k], x [k]) -> [n]`` (fp32, contiguous, CPU), or None where it cannot run."""
    if os.environ.get(ENV_VAR, "1") == "0" or torch.backends.cpu.get_cpu_capability() != "AVX512":
        return None
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        log.warning("no C compiler: batch-1 decode uses oneDNN's slower matrix-vector product")
        return None
    try:
        function = ctypes.CDLL(str(_build(compiler))).matvec_f32
    except subprocess.CalledProcessError as exc:
        log.warning("building %s failed: %s: batch-1 decode uses oneDNN", SOURCE.name, exc.stderr or exc)
        return None
    except OSError as exc:
        log.warning("loading %s failed (%s): batch-1 decode uses oneDNN", SOURCE.name, exc)
        return None
    function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
    function.restype = None

    def matvec(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        n, k = weight.shape
        out = torch.empty(n, dtype=torch.float32)
        function(weight.data_ptr(), x.data_ptr(), out.data_ptr(), n, k, torch.get_num_threads())
        return out

    return matvec


def can_stream(weight: torch.Tensor) -> bool:
    """Whether ``matvec`` can read this weight as it is."""
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and weight.is_contiguous()


def _build(compiler: str) -> Path:
    """The shared library for this source, compiler and flags, built once (atomically: concurrent builders agree)."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(SOURCE.read_bytes() + version.encode() + " ".join(FLAGS).encode()).hexdigest()[:16]
    cache_root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "oxygen_ros" / "kernels"
    library = cache_root / f"libcpu_matvec-{key}.so"
    if not library.exists():
        cache_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_root) as tmp:
            built = Path(tmp) / library.name
            subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(built)], capture_output=True, check=True)
            os.replace(built, library)
    return library
