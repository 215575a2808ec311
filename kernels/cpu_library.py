"""The CPU decode kernels (``cpu/*.c``): plain C with no torch headers, built by the machine's C compiler at first use
and called through ctypes with the tensors' pointers.

On a GPU the Triton kernels read the pool in place; on a CPU these do the same for fp32 pools (and int8 ones, for
decode attention), with fp32, bf16, int8 or Q4_1 weights:
the products of decode steps of one to eight rows (``matvec.c``), the decode tokens of one to eight sequences
through a whole Llama or Gemma decoder stack (``llama_decode_row.c``), a batch's decode attention over its paged
contexts (``paged_decode.c``) and a layer's element-wise steps (``row_ops.c``). The structs and functions Python calls are declared in ``oxygen_kernels.h``; the
library is used only when the layout it reports (``abi.c``) equals the ctypes mirrors (``cpu_abi``).

The instruction set is chosen when the library is built, for the CPU it runs on (``machine_isa``): AVX-512 (F, BW, VL,
DQ: what torch's AVX512 level implies), AVX2 + FMA, or aarch64 NEON (a Jetson, a Raspberry Pi 4/5); the kernels are
one source written against ``cpu/simd.h``'s 16-lane vectors, and no flag assumes more than the CPU has. Any other CPU
keeps torch's ops. ``OXYGEN_CPU_ISA`` picks a lower level than the CPU's (to measure or test it); one the CPU does not run is
refused, as it would stop the process with an illegal instruction. ``test/kernels/c/check_kernels.c`` checks every
level's build against scalar C (aarch64 under qemu-user).

The C compiler builds them in about a second, once per machine (cached by sources, compiler and flags under
``~/.cache/oxygen_ros/kernels``, written atomically so concurrent builders agree). Where no compiler is found, or the
kernels are turned off (``EngineConfig.cpu_kernels``), ``library()`` is None and callers keep torch's ops.
"""

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import struct
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import torch

from .cpu_abi import abi_mismatches

HERE = Path(__file__).parent / "cpu"
SOURCES = tuple(HERE / name for name in ("matvec.c", "llama_decode_row.c", "paged_decode.c", "row_ops.c", "abi.c"))
HEADERS = tuple(
    HERE / name for name in ("oxygen_kernels.h", "simd.h", "vector.h", "attention.h", "shared_prefix.h", "row_ops.h")
)
FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC")
ISA_FLAGS = {  # each level's flags (x86: avx512 > avx2; arm: neon)
    "avx512": ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"),
    "avx2": ("-mavx2", "-mfma"),
    "neon": ("-march=armv8-a",),  # NEON is part of every aarch64 CPU
}
ISA_ENV = "OXYGEN_CPU_ISA"
log = logging.getLogger(__name__)
_enabled = True  # EngineConfig.cpu_kernels, set once per engine (kv.attention_backend.choose_backend)


def enable(on: bool) -> None:
    """Whether the C kernels run at all in this process (off: torch's ops, to measure them alone)."""
    global _enabled
    _enabled = on


def library() -> ctypes.CDLL | None:
    """The loaded kernels, or None where they cannot run or are turned off."""
    return _loaded() if _enabled else None


def machine_isa() -> str | None:
    """The instruction set the kernels are built for here: the CPU's best, or a lower one named by ``OXYGEN_CPU_ISA``
    (one the CPU does not run is refused with a warning: it would crash the process); None where none runs."""
    supported = supported_isas()
    asked = os.environ.get(ISA_ENV, "").strip().lower()
    if asked and asked not in supported:
        log.warning("%s=%s is not one this CPU runs (%s)", ISA_ENV, asked, ", ".join(supported) or "none")
    return asked if asked in supported else supported[0] if supported else None


def supported_isas() -> tuple[str, ...]:
    """The levels this CPU runs, best first: read from the CPU's own flags where Linux lists them (torch's capability
    follows ``ATEN_CPU_CAPABILITY`` unchecked, which would let a wrong setting pick instructions the CPU lacks)."""
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return ("neon",) if struct.calcsize("P") == 8 else ()  # a 32-bit userland on a 64-bit kernel: no aarch64 code
    if machine not in ("x86_64", "amd64"):
        return ()
    flags = _cpu_flags()
    if flags is None:  # no /proc/cpuinfo: what torch found
        capability = torch.backends.cpu.get_cpu_capability()
        return {"AVX512": ("avx512", "avx2"), "AVX2": ("avx2",)}.get(capability, ())
    levels = {"avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"}, "avx2": {"avx2", "fma"}}
    return tuple(isa for isa, needs in levels.items() if needs <= flags)


def isa_flags(isa: str) -> tuple[str, ...]:
    """The compiler flags of a level on this CPU: its own, and F16C's on x86 where the CPU lists it (every AVX2 CPU
    has it, a VM may hide it; GGUF blocks' fp16 scales convert in one instruction with it, in a few without)."""
    flags = _cpu_flags()
    f16c = isa != "neon" and (flags is None or "f16c" in flags)  # no cpuinfo: torch found AVX2 or more
    return (*ISA_FLAGS[isa], *(("-mf16c",) if f16c else ()))


def _cpu_flags() -> set[str] | None:
    """The first CPU's feature flags as Linux lists them, or None where it does not."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return None


@cache
def _loaded() -> ctypes.CDLL | None:
    """The kernels built and loaded once, or None where they cannot run or their structs' layout differs from the
    mirrors (logged once)."""
    isa = machine_isa()
    if isa is None:
        return None
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        log.warning("no C compiler: decode runs on torch's slower ops")
        return None
    try:
        kernels = ctypes.CDLL(str(build_library(compiler, isa)))
    except subprocess.CalledProcessError as exc:
        log.warning("building the CPU decode kernels failed: %s: decode runs on torch's ops", exc.stderr or exc)
    except OSError as exc:
        log.warning("loading the CPU decode kernels failed (%s): decode runs on torch's ops", exc)
    else:
        mismatches = abi_mismatches(kernels)
        if not mismatches:
            log.info("CPU decode kernels built for %s", isa)
            return kernels
        log.error("the CPU decode kernels' structs differ from their ctypes mirrors (%s): torch's ops run instead",
                  "; ".join(mismatches))
    return None


def loaded_isa() -> str | None:
    """The instruction set of the loaded kernels (as the library reports it), or None where none are loaded."""
    kernels = library()
    if kernels is None:
        return None
    kernels.oxygen_isa.restype = ctypes.c_char_p
    return kernels.oxygen_isa().decode()


def build_library(compiler: str, isa: str) -> Path:
    """The shared library for these sources, compiler, instruction set and flags, built once."""
    flags = (*FLAGS, *isa_flags(isa))
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(version.encode() + " ".join(flags).encode())
    for path in (*SOURCES, *HEADERS):
        digest.update(path.read_bytes())
    cache_root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "oxygen_ros" / "kernels"
    built_library = cache_root / f"libcpu_decode-{isa}-{digest.hexdigest()[:16]}.so"
    if not built_library.exists():
        cache_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_root) as tmp:
            built = Path(tmp) / built_library.name
            command = [compiler, *flags, *map(str, SOURCES), "-o", str(built)]
            subprocess.run(command, capture_output=True, text=True, check=True)
            os.replace(built, built_library)
    return built_library
