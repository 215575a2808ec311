"""Every Triton kernel launch the pool makes, compiled ahead of time for each GPU architecture of ``gpu_targets`` on a
machine without a GPU: shared memory checked against the architecture's per-block limit, registers and spills read
from ``ptxas -v``.

    python -m oxygen_ros.kernels.triton_impl.aot [--arch 89 ...] [--json aot.json]

exits 1 when a launch does not fit or spills. What is compiled is what launches: the real launchers run on CPU
tensors shaped like the models we serve (SmolLM2, Llama 3 8B, pi0.5), their kernel calls are captured instead of
run, and each is specialized exactly as Triton's JIT specializes a launch (argument types, 16-byte alignment and
divisibility, integers equal to 1) for a ``GPUTarget`` (the wheel ships ptxas), with the device's shared memory
limit the launcher sizes its tile by. It needs triton's compiler, not its interpreter: run it without
``TRITON_INTERPRET`` (the interpreter replaces the JIT functions at triton's first import).
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import triton
from tqdm import tqdm
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from ..gpu_targets import ARCHITECTURES, SHARED_MEMORY_PER_BLOCK, decode_shared_bytes
from ..quant_spec import KVBlocks, KVQuantSpec
from . import blocks, paged_decode, write_kv

MODELS = {"SmolLM2": (9, 3, 64), "Llama 3 8B": (32, 8, 128), "pi0.5": (8, 1, 256)}  # heads, kv-heads, head_dim
FORMATS = ("fp32", "fp16", "bf16", "int8", "fp8")
KERNELS: dict[str, JITFunction] = {"paged_decode": paged_decode._paged_decode_kernel,
                                   "gather": blocks._gather_kernel, "write_kv": write_kv._write_kv_kernel,
                                   "write_key_blocks": write_kv._write_key_blocks_kernel,
                                   "requantize": blocks._requantize_kernel, "copy": blocks._copy_kernel}  # fmt: skip
LIMITED = (paged_decode, blocks, write_kv)  # launcher modules that size tiles by ``shared_limit``


@dataclass
class Build:
    """One captured launch compiled for one architecture, and what compiling it measured."""

    kernel: str
    case: str  # model, formats, block size, variant
    head_dim: int
    arch: int
    num_warps: int
    constants: dict[str, Any]
    limit: int
    shared: int = 0  # bytes per thread block
    registers: int = 0  # per thread
    spill_bytes: int = 0  # stores + loads

    @property
    def ok(self) -> bool:
        return self.shared <= self.limit and self.spill_bytes == 0

    @property
    def tile_tokens(self) -> int:
        return self.constants.get("BLOCKS", 0) * self.constants.get("BS_PAD", 0) or self.constants.get("BLOCK_T", 0)


@dataclass
class Launch:
    kernel: str
    case: str
    head_dim: int
    args: tuple
    kwargs: dict[str, Any]


@contextmanager
def captured(limit: int) -> Iterator[list[tuple[str, tuple, dict]]]:
    """Kernel launches recorded instead of run, with launchers seeing a device of ``limit`` bytes of shared memory."""
    calls: list[tuple[str, tuple, dict]] = []

    def recorder(name: str) -> Callable[..., None]:
        def run(*args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
            calls.append((name, args, kwargs))

        return run

    with ExitStack() as stack:
        for name, kernel in KERNELS.items():
            stack.enter_context(mock.patch.object(kernel, "run", recorder(name)))
        for module in LIMITED:
            if hasattr(module, "shared_limit"):
                stack.enter_context(mock.patch.object(module, "shared_limit", lambda device: limit))
        yield calls


def _pool(fmt: str, num_kv_heads: int, head_dim: int, block_size: int) -> KVBlocks:
    return KVBlocks.allocate(KVQuantSpec.parse(fmt), 8, block_size, num_kv_heads, head_dim)


def _compute(fmt: str) -> torch.dtype:
    """The dtype a pool of ``fmt`` serves on a GPU: its own for 16/32-bit floats, bf16 for one-byte codes."""
    return {"fp32": torch.float32, "fp16": torch.float16}.get(fmt, torch.bfloat16)


def _other_computes(fmt: str) -> tuple[torch.dtype, ...]:
    """The other queries a pool of ``fmt`` may meet: bf16 over fp32 (a bf16 model's full-precision units in a mixed
    pool) and over fp16 (the GPU's default compute dtype with ``kv_dtype: fp16``), fp32 over anything narrower (an
    fp32 model). fp16 queries over other formats (an fp16 model with another KV format) are not compiled."""
    return {"fp32": (torch.bfloat16,), "fp16": (torch.float32, torch.bfloat16)}.get(fmt, (torch.float32,))


def _unit_tokens(fmt: str) -> tuple[int, ...]:
    """The block sizes ``fmt``'s view takes in a mixed pool of 16-token blocks: a unit holds as many bytes as the
    narrowest format's block, so 16-bit codes beside one-byte ones are 8-token units and fp32 8 or 4."""
    itemsize = KVQuantSpec.parse(fmt).storage_dtype.itemsize
    return tuple(16 * narrow // itemsize for narrow in (1, 2, 4) if narrow <= itemsize and (narrow, itemsize) != (4, 4))


def _decode_cases(fmt: str) -> dict[tuple[int, torch.dtype, bool, bool], str]:
    """Every decode launch the engine can make over ``fmt`` for pools of 16-token blocks, as (block size, query
    dtype, log-sum-exp, block mass) -> case label: a single-format pool attends with or without the mass (which
    needs the log-sum-exp); a mixed pool's view always returns the log-sum-exp, with the mass on the eviction
    policy's steps; queries in the pool's compute dtype or the other one. The block table's width is not
    specialized (``do_not_specialize``), so one launch per case stands for every width."""
    cases = {}
    for q in (_compute(fmt), *_other_computes(fmt)):
        other = "" if q == _compute(fmt) else f" {str(q).removeprefix('torch.')} q"
        cases[(16, q, False, False)] = f"bs16{other}"
        for size in _unit_tokens(fmt):
            cases[(size, q, True, False)] = f"bs{size}{other}+lse"
            cases[(size, q, True, True)] = f"bs{size}{other}+lse+mass"
        cases[(16, q, True, True)] = f"bs16{other}+lse+mass"
    return cases


def launches(limit: int) -> list[Launch]:
    """Every launch the launchers make for the served shapes and formats (run on CPU tensors, captured)."""
    out: list[Launch] = []
    for model, (heads, kv_heads, head_dim) in MODELS.items():
        for fmt in FORMATS:
            dtype = _compute(fmt)
            for (block_size, q_dtype, lse, mass), case in _decode_cases(fmt).items():
                pool = _pool(fmt, kv_heads, head_dim, block_size)
                lens = torch.tensor([3 * block_size, 5 * block_size + 1])
                q = torch.zeros(2, heads, head_dim, dtype=q_dtype)
                extra = {"lse": torch.empty(2, heads)} if lse else {}
                extra |= {"block_mass": torch.zeros(2, 8)} if mass else {}
                with captured(limit) as calls:
                    paged_decode.paged_decode_attention(q, pool, torch.arange(8).repeat(2, 1), lens, 0.125, **extra)
                out += [Launch(k, f"{model} {fmt} {case}", head_dim, a, kw) for k, a, kw in calls]
            pool = _pool(fmt, kv_heads, head_dim, 16)
            with captured(limit) as calls:
                blocks.gather_kv(pool, torch.arange(4, dtype=torch.long)[None], 50, dtype)
                for tokens in (40, 1):  # a prefill chunk; one decode token (the JIT specializes an int equal to 1)
                    k = torch.zeros(tokens, kv_heads, head_dim, dtype=dtype)
                    write_kv.write_kv(pool, torch.arange(tokens, dtype=torch.long), k, k.clone(), all_stored=True)
            out += [Launch(k, f"{model} {fmt}", head_dim, a, kw) for k, a, kw in calls]
    _, kv_heads, head_dim = MODELS["pi0.5"]  # the widest head: the most registers per program
    ids = torch.arange(2, dtype=torch.long)
    for src in FORMATS:
        source = _pool(src, kv_heads, head_dim, 16)
        with captured(limit) as calls:
            blocks.copy_blocks(source, ids, source, ids + 2)
            for dst in FORMATS:
                if dst != src or dst in ("fp8", "int8"):  # tier moves (int8 to an int8 L1 too); fp8 rescales
                    blocks.requantize_blocks(source, ids, _pool(dst, kv_heads, head_dim, 16), ids)
        out += [Launch(k, f"pi0.5 {src}", head_dim, a, kw) for k, a, kw in calls]
    return out


def specialize(launch: Launch, target: GPUTarget) -> tuple[Any, dict, dict, dict]:
    """(options, signature, constants, attributes) of ``launch`` for ``target``, as Triton's JIT specializes it:
    two launches with equal ones run the same binary."""
    kernel = KERNELS[launch.kernel]
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*launch.args, **launch.kwargs)
    return kernel._pack_args(backend, launch.kwargs, bound, specialization, options)


def compile_launch(launch: Launch, arch: int, limit: int) -> Build:
    """Compile ``launch`` for ``arch`` as the JIT would on such a GPU and fill in shared memory (Triton's allocation),
    registers and spills (ptxas -v on the PTX, with the ptxas and flags Triton itself uses there)."""
    kernel = KERNELS[launch.kernel]
    target = GPUTarget("cuda", arch, 32)
    options, signature, constants, attrs = specialize(launch, target)
    compiled = triton.compile(ASTSource(kernel, signature, constants, attrs), target=target, options=options.__dict__)
    names = kernel.arg_names
    build = Build(launch.kernel, launch.case, launch.head_dim, arch, options.num_warps,
                  {names[path[0]]: value for path, value in constants.items()}, limit)  # fmt: skip
    build.shared = compiled.metadata.shared
    with tempfile.TemporaryDirectory() as folder:
        ptx = Path(folder) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"])
        command = [get_ptxas(arch).path, "-v", "--regAllocOptLevel=2",
                   *([] if options.enable_fp_fusion else ["--fmad=false"]),
                   f"--gpu-name={sm_arch_from_capability(arch)}", str(ptx), "-o", str(ptx.with_suffix(".o"))]
        log = subprocess.run(command, capture_output=True, text=True, check=True).stderr  # fmt: skip
    registers = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if registers is None or spills is None:
        raise RuntimeError(f"ptxas -v printed no register or spill counts for {launch.kernel}:\n{log}")
    build.registers = int(registers.group(1))
    build.spill_bytes = int(spills.group(1)) + int(spills.group(2))
    return build


def run(archs: list[int]) -> list[Build]:
    todo = [(launch, arch, SHARED_MEMORY_PER_BLOCK[arch]) for arch in archs
            for launch in launches(SHARED_MEMORY_PER_BLOCK[arch])]  # fmt: skip
    return [compile_launch(*item) for item in tqdm(todo, desc="compiling for GPUs", unit="kernel", disable=None)]


def table(builds: list[Build]) -> str:
    """Markdown: one row per build."""
    lines = ["| kernel | case | arch | warps | tile | shared (KB) / limit | registers | spills | ok |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for b in builds:
        lines.append(f"| {b.kernel} | {b.case} | sm_{b.arch} | {b.num_warps} | {b.tile_tokens or ''} | "
                     f"{b.shared / 1024:.1f} / {b.limit / 1024:.0f} | {b.registers} | {b.spill_bytes} | "
                     f"{'yes' if b.ok else 'NO'} |")  # fmt: skip
    return "\n".join(lines)


def decode_bound_holds(builds: list[Build]) -> bool:
    """Whether ``gpu_targets.decode_shared_bytes`` (what the launcher sizes tiles by) is >= every decode allocation."""
    return all(decode_shared_bytes(b.tile_tokens, b.head_dim, b.constants["GROUP"]) >= b.shared
               for b in builds if b.kernel == "paged_decode")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, action="append", choices=sorted(ARCHITECTURES),
                        help="compute capability x 10 (repeatable; default: all)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write every build's numbers here")
    args = parser.parse_args(argv)
    builds = run(args.arch or sorted(ARCHITECTURES))
    print(table(builds))
    bad = [b for b in builds if not b.ok]
    bound = decode_bound_holds(builds)
    print(f"{len(builds)} builds, {len(bad)} over the shared-memory limit or spilling; decode shared-memory bound "
          f"{'holds' if bound else 'is BELOW an allocation'}")  # fmt: skip
    if args.json:
        report = {"builds": [asdict(b) | {"ok": b.ok} for b in builds], "decode_bound_holds": bound}
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0 if not bad and bound else 1


if __name__ == "__main__":
    sys.exit(main())
