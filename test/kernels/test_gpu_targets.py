"""The Triton kernels are proven to build for the GPUs robots and servers have, on this machine without one: every
launch the launchers make (each kernel, KV format and block size for SmolLM2's, Llama 3's and pi0.5's heads), captured
and specialized as Triton's JIT would, compiled ahead of time for sm_80, sm_87 (Jetson Orin), sm_89 and sm_90, fits
the architecture's shared memory per block and spills no register (ptxas -v). sm_86 (RTX 3090, A10), sm_89's shared
memory limit and so its tiles, is left to the tool's full run (docs/benchmarks.md): four architectures split evenly
over two compilers keep the cold compile of CI's fresh machine at two architectures' time. The tile comes from the head size
and the device: pi0.5's decode at the old fixed tile (64 tokens, 4 warps, 3 stages, fp32 dots) needs more shared
memory than an sm_89 block has, and that configuration fails the same check."""

import json
import os
import subprocess
import sys

import pytest

from oxygen_ros.kernels.gpu_targets import (
    ARCHITECTURES,
    SHARED_MEMORY_PER_BLOCK,
    decode_shared_bytes,
    decode_tile,
    tile_config,
)

pytestmark = pytest.mark.slow

PI05_HEAD_DIM, PI05_GROUP = 256, 8
REQUIRED = {80, 87, 89, 90}  # the issue's: A100, Jetson Orin, RTX 4090 / L4, H100 / H200


def _compiler_env() -> dict[str, str]:
    """This environment without the interpreter: triton must compile, not interpret (conftest sets it)."""
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def test_the_decode_tile_shrinks_to_the_devices_shared_memory_or_is_refused():
    for arch, limit in SHARED_MEMORY_PER_BLOCK.items():
        for head_dim in (64, 128, 256):
            for dot in ("tf32", "ieee"):
                tile = decode_tile(head_dim, PI05_GROUP, dot, limit)
                assert decode_shared_bytes(tile.tokens, head_dim, PI05_GROUP) <= limit, (arch, head_dim, tile)
    assert decode_shared_bytes(64, PI05_HEAD_DIM, PI05_GROUP) > SHARED_MEMORY_PER_BLOCK[89]  # the old tile
    assert decode_tile(128, 128, "tf32", None).tokens == 32
    assert decode_tile(128, 128, "tf32", SHARED_MEMORY_PER_BLOCK[89]).tokens == 16  # 4 x 128 x 128 B of queries
    with pytest.raises(ValueError, match="head_dim 256 with 64 query heads"):
        decode_tile(PI05_HEAD_DIM, 64, "tf32", SHARED_MEMORY_PER_BLOCK[89])
    with pytest.raises(ValueError, match="head_dim 512: the decode kernel's tiles are checked"):
        decode_tile(512, 1, "tf32", SHARED_MEMORY_PER_BLOCK[90])
    assert tile_config(64).tokens == 64 and tile_config(PI05_HEAD_DIM).tokens == 16  # gather / write_kv
    for head_dim in (16, 32, 48):  # narrower heads (and the engine's startup probe, head_dim 16) take the 64 tile
        assert decode_tile(head_dim, 1, "ieee", SHARED_MEMORY_PER_BLOCK[89]) == decode_tile(64, 1, "ieee", None)


def test_a_block_wider_than_the_tile_is_refused_on_a_gpu_only():
    from oxygen_ros.kernels.triton_impl.common import tile_shape  # imports triton: after conftest chose the mode

    assert tile_shape(16, 16, SHARED_MEMORY_PER_BLOCK[89]) == (16, 1) and tile_shape(4, 64, None) == (4, 16)
    assert tile_shape(64, 16, None) == (64, 1)  # the interpreter takes it whole
    with pytest.raises(ValueError, match="block_size 64 is wider than the 16-token tile"):
        tile_shape(64, 16, SHARED_MEMORY_PER_BLOCK[89])


def test_every_kernel_launch_compiles_for_every_architecture_within_its_limits(tmp_path):
    assert REQUIRED <= set(ARCHITECTURES)
    archs = sorted(REQUIRED)
    halves = [archs[::2], archs[1::2]]  # two compilers at once on two cores, two architectures each
    runs = []
    for i, half in enumerate(halves):
        command = [sys.executable, "-m", "oxygen_ros.kernels.triton_impl.aot", "--json", str(tmp_path / f"{i}.json")]
        command += [arg for arch in half for arg in ("--arch", str(arch))]
        runs.append(subprocess.Popen(command, env=_compiler_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True))  # fmt: skip
    outputs = [run.communicate(timeout=1200)[0] for run in runs]
    builds, bounds = [], []
    for i, run in enumerate(runs):
        assert run.returncode == 0, outputs[i][-3000:]
        report = json.loads((tmp_path / f"{i}.json").read_text())
        builds += report["builds"]
        bounds.append(report["decode_bound_holds"])
    assert all(bounds), "the launcher's shared-memory bound is below an allocation"
    assert {b["arch"] for b in builds} == set(archs)
    assert {b["kernel"] for b in builds} == {"paged_decode", "gather", "write_kv", "write_key_blocks", "requantize",
                                                  "copy"}
    bad = [(b["kernel"], b["case"], b["arch"], b["shared"], b["spill_bytes"]) for b in builds
           if b["shared"] > b["limit"] or b["spill_bytes"]]  # fmt: skip
    assert not bad, bad
    decode = {(b["case"], b["arch"]) for b in builds if b["kernel"] == "paged_decode"}
    assert {("pi0.5 int8 bs16+lse+mass", 89), ("pi0.5 fp32 bs4+lse+mass", 89), ("SmolLM2 fp8 bs16", 87),
            ("Llama 3 8B fp32 bs16", 90), ("pi0.5 int8 bs16+lse", 90), ("SmolLM2 bf16 bs8+lse+mass", 80),
            ("pi0.5 fp32 bs4 bfloat16 q+lse+mass", 80), ("Llama 3 8B fp8 bs16 float32 q", 87),
            ("pi0.5 fp16 bs8 bfloat16 q+lse", 89)} <= decode  # fmt: skip
    pi05 = next(b for b in builds if (b["kernel"], b["case"], b["arch"]) == ("paged_decode", "pi0.5 bf16 bs16", 89))
    print(f"pi0.5 decode on sm_89: {pi05['shared']} of {pi05['limit']} B shared, {pi05['registers']} registers, "
          f"{len(builds)} builds in all")


OLD_TILE = """
from unittest import mock
from oxygen_ros.kernels.gpu_targets import SHARED_MEMORY_PER_BLOCK, TileConfig
from oxygen_ros.kernels.triton_impl import aot, paged_decode
limit = SHARED_MEMORY_PER_BLOCK[89]
with mock.patch.object(paged_decode, "decode_tile", lambda *a: TileConfig(64, 4, 3)), \
        mock.patch.object(paged_decode, "dot_precision", lambda *a: "ieee"):
    launch = next(x for x in aot.launches(limit) if (x.kernel, x.case) == ("paged_decode", "pi0.5 bf16 bs16"))
build = aot.compile_launch(launch, 89, limit)
print(build.ok, build.shared, build.limit, build.spill_bytes)
"""


WIDTHS = """
import torch
from triton.backends.compiler import GPUTarget
from oxygen_ros.kernels.gpu_targets import SHARED_MEMORY_PER_BLOCK
from oxygen_ros.kernels.triton_impl import aot, blocks, paged_decode
limit, keys = SHARED_MEMORY_PER_BLOCK[89], set()
pool = aot._pool("bf16", 3, 64, 16)
for width, tokens in ((1, 1), (8, 50), (16, 64), (33, 500)):
    table = torch.arange(width).repeat(2, 1)
    with aot.captured(limit) as calls:
        paged_decode.paged_decode_attention(torch.zeros(2, 9, 64, dtype=torch.bfloat16), pool, table,
                                            torch.tensor([5, 9]), 0.125)
        blocks.gather_kv(pool, table[:1], tokens, torch.bfloat16)
    for kernel, args, kwargs in calls:
        options, signature, constants, attrs = aot.specialize(aot.Launch(kernel, "", 64, args, kwargs),
                                                              GPUTarget("cuda", 89, 32))
        keys.add((kernel, repr((signature, constants, attrs))))
        assert kernel != "paged_decode" or options.maxnreg == 255
print(sorted(kernel for kernel, _ in keys))
"""


def test_one_build_serves_every_table_width_and_prefix_length():
    """The decode and gather kernels do not specialize on a block table's width or a gather's length (which change
    as contexts grow: every width divisible by 16, or equal to 1, would be another JIT build on a robot), so the
    check's one launch per case stands for all of them; the decode kernel lifts ptxas's register cap."""
    out = subprocess.run([sys.executable, "-c", WIDTHS], env=_compiler_env(), capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["['gather',", "'paged_decode']"], out.stdout


def test_the_old_fixed_tile_for_pi05_on_sm89_fails_the_check():
    out = subprocess.run([sys.executable, "-c", OLD_TILE], env=_compiler_env(), capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    ok, shared, limit, spills = out.stdout.split()
    assert ok == "False" and int(shared) > int(limit), out.stdout
