"""Every CPU kernel on every robot CPU: ``c/check_kernels.c`` (scalar C references, no Python) built for each
instruction set ``cpu_library`` can pick and run where that CPU is, natively or under qemu-user: AVX-512 and AVX2
here, linked with the very library the engine loads; AVX2 again on qemu's Haswell, which has no AVX-512 (an AVX-512
instruction there stops the run with SIGILL, tested); aarch64 NEON, cross compiled, on a Cortex-A53 (ARMv8.0: no
dotprod) and on qemu's `max` CPU. The cross compiler and qemu-user come from Debian (`make cross-tools`; `.ci/run`
installs them)."""

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from oxygen_ros.kernels import cpu_library

DRIVER = Path(__file__).parent / "c" / "check_kernels.c"
CROSS = "aarch64-linux-gnu-gcc"
# (instruction set, how the program runs: None natively, else the qemu-user command line)
BUILDS = [
    ("avx512", None),
    ("avx2", None),
    ("avx2", ("qemu-x86_64", "-cpu", "Haswell")),
    ("neon", ("qemu-aarch64", "-cpu", "cortex-a53")),
    ("neon", ("qemu-aarch64", "-cpu", "max")),
]
MISSING_TOOLS = "needs {} (Debian's gcc-aarch64-linux-gnu and qemu-user: `make cross-tools`)"
WARNINGS = ("-Wall", "-Wextra", "-Werror")
CHECKS = 157  # what check_kernels.c checks, counted: a check that stops running fails the test


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(MISSING_TOOLS.format(name))
    return path


def _compile(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    """Each instruction set's driver, built once: x86 levels linked with the library ``cpu_library`` builds and
    caches for the engine (the AVX-512 one is the engine's own), aarch64 statically from the sources (qemu then
    needs no aarch64 libraries), one object per source at a time on the two cores."""
    folder, built = tmp_path_factory.mktemp("c_kernels"), {}

    def get(isa: str) -> Path:
        if isa in built:
            return built[isa]
        program = folder / f"check_kernels_{isa}"
        include = f"-I{cpu_library.HERE}"
        if isa == "neon":
            cross = _tool(CROSS)
            flags = ["-O3", "-fopenmp", *WARNINGS, *cpu_library.ISA_FLAGS[isa], include]
            objects = [folder / f"{source.stem}.o" for source in (DRIVER, *cpu_library.SOURCES)]
            jobs = [subprocess.Popen([cross, *flags, "-c", str(source), "-o", str(obj)], stderr=subprocess.PIPE,
                                     text=True) for source, obj in zip((DRIVER, *cpu_library.SOURCES), objects)]  # fmt: skip
            for job in jobs:
                assert job.wait(timeout=600) == 0, job.stderr.read()[-4000:]
            _compile([cross, "-fopenmp", "-static", *map(str, objects), "-lm", "-o", str(program)])
        else:
            compiler = _tool("cc")
            library = cpu_library.build_library(compiler, isa)
            _compile([compiler, "-O2", "-fopenmp", *WARNINGS, include, str(DRIVER), str(library),
                      f"-Wl,-rpath,{library.parent}", "-lm", "-o", str(program)])  # fmt: skip
        built[isa] = program
        return program

    return get


def _runs_natively(isa: str) -> bool:
    return isa in cpu_library.supported_isas()


@pytest.mark.parametrize(("isa", "emulator"), BUILDS,
                         ids=[f"{isa}-{emulator[-1] if emulator else 'native'}" for isa, emulator in BUILDS])
def test_every_kernel_equals_scalar_c(programs, isa, emulator):
    if emulator is None and not _runs_natively(isa):
        pytest.skip(f"this CPU does not run {isa} code (its build is checked where it does)")
    if emulator and platform.machine().lower() in ("aarch64", "arm64") and isa != "neon":
        pytest.skip("x86 builds are checked on x86 machines")
    command = [_tool(emulator[0]), *emulator[1:]] if emulator else []
    run = subprocess.run([*command, str(programs(isa))], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0] == f"isa {isa}" and lines[-1] == f"all {CHECKS} checks passed on {isa}"
    assert sum(line.startswith("ok ") for line in lines) == CHECKS  # every check ran and said so


def test_an_avx512_build_stops_on_a_cpu_without_avx512(programs):
    """What makes the Haswell run above a proof: the same emulator refuses AVX-512 code."""
    if not _runs_natively("avx512"):
        pytest.skip("no AVX-512 build here")
    run = subprocess.run([_tool("qemu-x86_64"), "-cpu", "Haswell", str(programs("avx512"))], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode in (-4, 128 + 4), (run.returncode, run.stderr[-500:])  # SIGILL


def test_the_loaded_library_is_built_for_the_chosen_instruction_set(monkeypatch):
    """`OXYGEN_CPU_ISA` picks a lower level; one this CPU does not run is refused for the CPU's best."""
    monkeypatch.delenv(cpu_library.ISA_ENV, raising=False)
    supported = cpu_library.supported_isas()
    best = supported[0] if supported else None
    assert cpu_library.machine_isa() == best
    monkeypatch.setenv(cpu_library.ISA_ENV, supported[-1] if supported else "avx2")
    assert cpu_library.machine_isa() == (supported[-1] if supported else None)
    monkeypatch.setenv(cpu_library.ISA_ENV, "avx512" if best == "neon" else "neon")
    assert cpu_library.machine_isa() == best
    monkeypatch.delenv(cpu_library.ISA_ENV)
    if cpu_library.library() is not None:
        assert cpu_library.loaded_isa() == best
