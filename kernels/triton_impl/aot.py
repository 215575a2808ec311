"""Every Triton kernel configuration the dispatcher launches, compiled ahead of time for each GPU architecture of
``gpu_targets`` on a machine without a GPU: ``triton.compile`` with a ``GPUTarget`` (the wheel ships ptxas), shared
memory checked against the architecture's per-block limit, registers and spills read from ``ptxas -v`` on the PTX.

    python -m oxygen_ros.kernels.triton_impl.aot [--arch 89 ...] [--json aot.json]

exits 1 when a configuration does not fit or spills. It needs triton's compiler, not its interpreter: run it without
``TRITON_INTERPRET`` (the interpreter replaces the JIT functions at triton's first import).
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import triton
from tqdm import tqdm
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability
from triton.compiler import ASTSource

from ..gpu_targets import ARCHITECTURES, SHARED_MEMORY_PER_BLOCK, decode_shared_bytes
from .blocks import _copy_kernel, _gather_kernel, _requantize_kernel, gather_constants, requantize_constants
from .common import kind_code
from .paged_decode import _paged_decode_kernel, decode_constants
from .write_kv import _write_kv_kernel, write_constants

# KV storage -> (the code pointer the kernels get, the compute dtype a pool of it serves on a GPU)
FORMATS = {"fp32": ("*fp32", "*fp32"), "fp16": ("*fp16", "*fp16"), "bf16": ("*bf16", "*bf16"), "int8": ("*i8", "*bf16"),
           "fp8": ("*u8", "*bf16")}  # fmt: skip
KIND_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "int8", "fp8": "float8_e4m3fn"}
HEAD_DIMS = {64: "SmolLM2, SmolVLM", 128: "Llama 3.x, Qwen3, SmolLM3", 256: "pi0 / pi0.5 (Gemma)"}
GROUP = 8  # query heads per kv-head: pi0.5's 8 / 1, Llama 3 70B's 64 / 8; groups up to 16 pad to the same tile
BLOCK_SIZE = 16
REQUANTIZE_PAIRS = [(a, "int8") for a in FORMATS if a != "int8"] + [("int8", b) for b in FORMATS if b != "int8"] + [
    ("fp8", "fp8")]  # to and from the int8 host tier, and fp8 rescaled in place  # fmt: skip
SCALED = ("int8", "fp8")


@dataclass
class Build:
    """One kernel configuration for one architecture, and what compiling it measured."""

    kernel: str
    formats: str
    head_dim: int
    arch: int
    num_warps: int
    constants: dict[str, Any]
    shared: int = 0  # bytes per thread block
    registers: int = 0  # per thread
    spill_bytes: int = 0  # stores + loads
    limit: int = field(init=False)

    def __post_init__(self) -> None:
        self.limit = SHARED_MEMORY_PER_BLOCK[self.arch]

    @property
    def ok(self) -> bool:
        return self.shared <= self.limit and self.spill_bytes == 0


def _kind(name: str) -> int:
    return kind_code(getattr(torch, KIND_DTYPES[name]))


def _signature(fn: Any, pointers: dict[str, str], constants: dict[str, Any], floats: tuple[str, ...] = ()) -> dict:
    return {name: "constexpr" if name in constants else pointers.get(name) or ("fp32" if name in floats else "i32")
            for name in fn.arg_names}  # fmt: skip


def plan(archs: list[int]) -> list[tuple[Build, Any, dict[str, str], tuple[str, ...], bool]]:
    """(build, kernel, pointer types, float scalars, fp fusion) for every configuration the launchers pick."""
    out = []
    for arch in archs:
        limit = SHARED_MEMORY_PER_BLOCK[arch]
        for name, (code, compute) in FORMATS.items():
            scale = "*fp32" if name in SCALED else code
            planes = {"k_cache": code, "v_cache": code, "k_scale": scale, "v_scale": scale}
            for head_dim in HEAD_DIMS:
                constants, warps = decode_constants(GROUP, head_dim, BLOCK_SIZE, _kind(name), True, True, limit)
                pointers = planes | {"q_ptr": compute, "out_ptr": compute, "table_ptr": "*i64", "context_ptr": "*i32",
                                     "lse_ptr": "*fp32", "block_lse_ptr": "*fp32"}  # fmt: skip
                out.append((Build("paged_decode", name, head_dim, arch, warps, constants), _paged_decode_kernel,
                            pointers, ("sm_scale",), True))  # fmt: skip
                constants, warps = gather_constants(head_dim, BLOCK_SIZE, _kind(name))
                pointers = planes | {"table_ptr": "*i64", "k_out": compute, "v_out": compute}
                out.append((Build("gather", name, head_dim, arch, warps, constants), _gather_kernel, pointers, (), True))
                constants, warps = write_constants(head_dim, _kind(name))
                pointers = planes | {"k_ptr": compute, "v_ptr": compute, "slot_ptr": "*i64"}
                out.append((Build("write_kv", name, head_dim, arch, warps, constants), _write_kv_kernel, pointers, (),
                            False))  # fmt: skip
        for src, dst in REQUANTIZE_PAIRS:
            (src_code, _), (dst_code, _) = FORMATS[src], FORMATS[dst]
            pointers = {"src_k": src_code, "src_v": src_code, "dst_k": dst_code, "dst_v": dst_code,
                        "src_ks": "*fp32" if src in SCALED else src_code, "src_vs": "*fp32" if src in SCALED else src_code,
                        "dst_ks": "*fp32" if dst in SCALED else dst_code, "dst_vs": "*fp32" if dst in SCALED else dst_code,
                        "src_ids": "*i64", "dst_ids": "*i64"}  # fmt: skip
            head_dim = max(HEAD_DIMS)  # one block per program: the widest head holds the most registers
            constants = requantize_constants(head_dim, BLOCK_SIZE, _kind(src), _kind(dst))
            out.append((Build("requantize", f"{src}->{dst}", head_dim, arch, 4, constants), _requantize_kernel,
                        pointers, (), False))  # fmt: skip
        for name in ("bf16", "int8"):
            code = FORMATS[name][0]
            scale = "*fp32" if name in SCALED else code
            pointers = {"src_k": code, "src_v": code, "dst_k": code, "dst_v": code, "src_ks": scale, "src_vs": scale,
                        "dst_ks": scale, "dst_vs": scale, "src_ids": "*i64", "dst_ids": "*i64"}  # fmt: skip
            constants = {"CHUNK": 1024, "HAS_TOKEN_SCALES": name == "int8"}
            out.append((Build("copy", name, 0, arch, 4, constants), _copy_kernel, pointers, (), True))
    return out


def compile_build(build: Build, fn: Any, pointers: dict[str, str], floats: tuple[str, ...], fusion: bool) -> Build:
    """Compile ``build`` for its architecture and fill in shared memory (Triton's allocation), registers and spills
    (ptxas -v on the PTX, with the ptxas and flags Triton itself uses for that architecture)."""
    source = ASTSource(fn, _signature(fn, pointers, build.constants, floats), build.constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", build.arch, 32),
                              options={"num_warps": build.num_warps, "enable_fp_fusion": fusion})  # fmt: skip
    build.shared = compiled.metadata.shared
    with tempfile.TemporaryDirectory() as folder:
        ptx = Path(folder) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"])
        command = [get_ptxas(build.arch).path, "-v", "--regAllocOptLevel=2", *([] if fusion else ["--fmad=false"]),
                   f"--gpu-name={sm_arch_from_capability(build.arch)}", str(ptx), "-o", str(ptx.with_suffix(".o"))]
        log = subprocess.run(command, capture_output=True, text=True, check=True).stderr  # fmt: skip
    registers = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if registers is None or spills is None:
        raise RuntimeError(f"ptxas -v printed no register or spill counts for {build.kernel}:\n{log}")
    build.registers = int(registers.group(1))
    build.spill_bytes = int(spills.group(1)) + int(spills.group(2))
    return build


def run(archs: list[int]) -> list[Build]:
    todo = plan(archs)
    return [compile_build(*item) for item in tqdm(todo, desc="compiling for GPUs", unit="kernel", disable=None)]


def table(builds: list[Build]) -> str:
    """Markdown: one row per build, with the decode kernel's shared-memory bound beside Triton's allocation."""
    lines = ["| kernel | formats | head_dim | arch | warps | tile | shared (KB) / limit | registers | spills | ok |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for b in builds:
        tile = b.constants.get("BLOCKS", 0) * b.constants.get("BS_PAD", 0) or b.constants.get("BLOCK_T", "")
        lines.append(f"| {b.kernel} | {b.formats} | {b.head_dim or ''} | sm_{b.arch} | {b.num_warps} | {tile} | "
                     f"{b.shared / 1024:.1f} / {b.limit / 1024:.0f} | {b.registers} | {b.spill_bytes} | "
                     f"{'yes' if b.ok else 'NO'} |")  # fmt: skip
    return "\n".join(lines)


def decode_bound_holds(builds: list[Build]) -> bool:
    """Whether ``gpu_targets.decode_shared_bytes`` (what the launcher sizes tiles by) is >= every decode allocation."""
    return all(decode_shared_bytes(b.constants["BLOCKS"] * b.constants["BS_PAD"], b.head_dim, GROUP) >= b.shared
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
        args.json.write_text(json.dumps({"builds": [asdict(b) | {"ok": b.ok} for b in builds],
                                         "decode_bound_holds": bound}, indent=1))  # fmt: skip
    return 0 if not bad and bound else 1


if __name__ == "__main__":
    sys.exit(main())
