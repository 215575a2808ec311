"""The C kernels' struct layout and constants (``cpu/oxygen_kernels.h``, reported by ``cpu/abi.c``) against the ctypes
mirrors (``cpu_abi``): the built library equals every mirror, and a mirror with two fields swapped or one missing, or a
format renumbered, is reported with its struct, field or constant named, which keeps ``cpu_library`` from loading a
library it would misread."""

import ctypes

import pytest

from oxygen_ros.kernels.cpu_abi import CONSTANTS, MIRRORS, RowModel, RowStep, abi_layout, abi_mismatches
from oxygen_ros.kernels.cpu_library import library

kernels = library()
pytestmark = pytest.mark.skipif(kernels is None,
                                reason="the CPU decode kernels do not run here (no AVX-512, AVX2 or NEON, or no C compiler)")


def _mirror(like: type[ctypes.Structure], fields: list[tuple]) -> type[ctypes.Structure]:
    """A mirror under ``like``'s name with these fields."""
    return type(like.__name__, (ctypes.Structure,), {"_fields_": fields})


def test_the_library_equals_every_mirror():
    assert abi_mismatches(kernels) == []
    structs = {name for name in abi_layout(kernels) if "." not in name}
    assert structs == {mirror.__name__ for mirror in MIRRORS}  # every struct of the header has its mirror
    constants = {name.removeprefix("const.") for name in abi_layout(kernels) if name.startswith("const.")}
    assert constants == set(CONSTANTS)  # and every constant the library reports its mirror


def test_a_renumbered_format_and_an_unknown_constant_are_named():
    drifted = CONSTANTS | {"WEIGHTS_Q4_1": 4, "Q4_0_BYTES": 18}
    assert abi_mismatches(kernels, MIRRORS, drifted) == ["WEIGHTS_Q4_1: 4 here, 3 in the library",
                                                         "Q4_0_BYTES: no such constant in the library"]  # fmt: skip


def test_swapped_fields_of_one_size_are_named():
    fields = list(RowStep._fields_)
    fields[1], fields[2] = fields[2], fields[1]  # cos and sin: same size, so the struct's size is unchanged
    swapped = _mirror(RowStep, fields)
    assert ctypes.sizeof(swapped) == ctypes.sizeof(RowStep)
    cos, sin = RowStep.cos.offset, RowStep.sin.offset
    assert abi_mismatches(kernels, [swapped]) == [f"RowStep.cos: offset {sin} here, {cos} in the library",
                                                  f"RowStep.sin: offset {cos} here, {sin} in the library"]  # fmt: skip


def test_a_missing_field_is_named():
    missing = _mirror(RowModel, [field for field in RowModel._fields_ if field[0] != "eps"])
    mismatches = abi_mismatches(kernels, [missing])
    assert "RowModel.eps: missing here" in mismatches
    assert f"RowModel.scale: offset {RowModel.eps.offset} here, {RowModel.scale.offset} in the library" in mismatches
    assert all(line.startswith("RowModel") for line in mismatches)
