"""The CPU decode kernels (``cpu/*.c``): plain C with no torch headers, built by the machine's C compiler at first use
and called through ctypes with the tensors' pointers.

On a GPU the Triton kernels read the pool in place; on a CPU these do the same for fp32 pools (fp32 or bf16 weights):
the products of decode steps of one to eight rows (``matvec.c``), a batch-1 token through the whole Llama decoder
stack (``llama_decode_row.c``), a batch's decode attention over its paged contexts (``paged_decode.c``) and a layer's
element-wise steps (``row_ops.c``). The structs and functions Python calls are declared in ``oxygen_kernels.h``; the
library is used only when the layout it reports (``abi.c``) equals the ctypes mirrors (``cpu_abi``).

gcc builds them in about a second, once per machine (cached by sources, compiler and flags under
``~/.cache/oxygen_ros/kernels``, written atomically so concurrent builders agree). They need AVX-512 (F, BW, VL and
DQ: what torch's AVX512 level implies) and a C compiler; where either is missing, or turned off (``EngineConfig.cpu_kernels``),
``library()`` is None and callers keep torch's ops.
"""

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import torch

from .cpu_abi import abi_mismatches

HERE = Path(__file__).parent / "cpu"
SOURCES = tuple(HERE / name for name in ("matvec.c", "llama_decode_row.c", "paged_decode.c", "row_ops.c", "abi.c"))
HEADERS = tuple(HERE / name for name in ("oxygen_kernels.h", "vector.h", "attention.h", "shared_prefix.h", "row_ops.h"))
FLAGS = ("-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-fopenmp", "-shared", "-fPIC")
log = logging.getLogger(__name__)
_enabled = True  # EngineConfig.cpu_kernels, set once per engine (kv.attention_backend.choose_backend)


def enable(on: bool) -> None:
    """Whether the C kernels run at all in this process (off: torch's ops, to measure them alone)."""
    global _enabled
    _enabled = on


def library() -> ctypes.CDLL | None:
    """The loaded kernels, or None where they cannot run or are turned off."""
    return _loaded() if _enabled else None


@cache
def _loaded() -> ctypes.CDLL | None:
    """The kernels built and loaded once, or None where they cannot run or their structs' layout differs from the
    mirrors (logged once)."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return None
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        log.warning("no C compiler: batch-1 decode runs on torch's slower ops")
        return None
    try:
        kernels = ctypes.CDLL(str(_build(compiler)))
    except subprocess.CalledProcessError as exc:
        log.warning("building the CPU decode kernels failed: %s: batch-1 decode runs on torch's ops", exc.stderr or exc)
    except OSError as exc:
        log.warning("loading the CPU decode kernels failed (%s): batch-1 decode runs on torch's ops", exc)
    else:
        mismatches = abi_mismatches(kernels)
        if not mismatches:
            return kernels
        log.error("the CPU decode kernels' structs differ from their ctypes mirrors (%s): torch's ops run instead",
                  "; ".join(mismatches))
    return None


def _build(compiler: str) -> Path:
    """The shared library for these sources, compiler and flags, built once."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(version.encode() + " ".join(FLAGS).encode())
    for path in (*SOURCES, *HEADERS):
        digest.update(path.read_bytes())
    cache_root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "oxygen_ros" / "kernels"
    built_library = cache_root / f"libcpu_decode-{digest.hexdigest()[:16]}.so"
    if not built_library.exists():
        cache_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_root) as tmp:
            built = Path(tmp) / built_library.name
            command = [compiler, *FLAGS, *map(str, SOURCES), "-o", str(built)]
            subprocess.run(command, capture_output=True, text=True, check=True)
            os.replace(built, built_library)
    return built_library
