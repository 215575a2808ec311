"""The ctypes mirrors of the structs and constants the CPU kernels take (``cpu/oxygen_kernels.h``), and their check
against the built library.

ctypes cannot read a C header: each struct is written again here, field for field, and each enum member and size the
Python side passes or lays memory out by (KV and weight formats, group sizes). A mirror that drifts from the header (a
field added, moved or retyped, a format renumbered on one side only) would pass the kernels pointers where they read
sizes, or one format where they read another, so ``cpu_library`` loads a library only when ``abi_mismatches`` finds
none: every mirror's size, each field's offset and each constant equal what the library reports (``cpu/abi.c``),
matched by name.
"""

import ctypes
from collections.abc import Sequence

Mirror = type[ctypes.Structure]

KV_F32, KV_I8 = 0, 1  # how a pool view stores K and V
WEIGHTS_F32, WEIGHTS_BF16, WEIGHTS_I8, WEIGHTS_Q4_1 = 0, 1, 2, 3  # how a weight matrix's rows are stored
I8_GROUP = 32  # int8 weights one scale covers along a row
Q4_1_GROUP, Q4_1_BYTES = 32, 20  # weights a GGUF Q4_1 block holds along a row, and its bytes
ACT_SILU, ACT_GELU_TANH = 0, 1  # the gated MLP's activation: SwiGLU, or Gemma's GeGLU
STREAMED_MAX_INPUTS = 8  # input rows one pass over the weights serves (cpu/vector.h sizes its sums by it)
CONSTANTS = {"KV_F32": KV_F32, "KV_I8": KV_I8, "WEIGHTS_F32": WEIGHTS_F32, "WEIGHTS_BF16": WEIGHTS_BF16,
             "WEIGHTS_I8": WEIGHTS_I8, "WEIGHTS_Q4_1": WEIGHTS_Q4_1, "I8_GROUP": I8_GROUP, "Q4_1_GROUP": Q4_1_GROUP,
             "Q4_1_BYTES": Q4_1_BYTES, "ACT_SILU": ACT_SILU, "ACT_GELU_TANH": ACT_GELU_TANH,
             "STREAMED_MAX_INPUTS": STREAMED_MAX_INPUTS}  # fmt: skip


class PagedDecode(ctypes.Structure):
    """A batch's decode attention over its paged contexts (``cpu_paged_decode``)."""

    _fields_ = [(name, ctypes.c_void_p) for name in
                ("q", "k", "v", "tables", "lengths", "out", "block_mass", "scratch", "group_rows", "group_starts",
                 "group_blocks", "k_scale", "v_scale")]  # fmt: skip
    _fields_ += [(name, ctypes.c_int64) for name in
                 ("seqs", "heads", "kv_heads", "head_dim", "block_size", "width", "max_length", "groups",
                  "kv_format")]  # fmt: skip
    _fields_ += [("scale", ctypes.c_float)]


class RowLayer(ctypes.Structure):
    """One decoder layer of the one-call stack (``cpu_decode_row``): its weights, its pool view, int8 group scales."""

    _fields_ = [(name, ctypes.c_void_p) for name in
                ("input_norm", "qkv_bias", "post_norm", "qkv", "o", "gate_up", "down", "k_cache", "v_cache",
                 "qkv_scale", "o_scale", "gate_up_scale", "down_scale")]  # fmt: skip


class RowModel(ctypes.Structure):
    """The one-call stack's shape."""

    _fields_ = [(name, ctypes.c_int64) for name in
                ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "block_size", "weight_format",
                 "activation")]
    _fields_ += [("eps", ctypes.c_float), ("scale", ctypes.c_float)]


class RowStep(ctypes.Structure):
    """One decode step of the stack: its rows' hidden states, RoPE angles and contexts."""

    _fields_ = [(name, ctypes.c_void_p) for name in
                ("h", "cos", "sin", "tables", "lengths", "slots", "block_mass", "scratch")]  # fmt: skip
    _fields_ += [(name, ctypes.c_int64) for name in ("rows", "width", "max_length")]


MIRRORS: tuple[Mirror, ...] = (PagedDecode, RowLayer, RowModel, RowStep)


def abi_layout(library: ctypes.CDLL) -> dict[str, int] | None:
    """The library's layout: ``{"Struct": sizeof, "Struct.field": offsetof}`` for every struct of its header, or None
    where it does not report one (a library built before ``cpu/abi.c``)."""
    try:
        report = library.oxygen_abi
    except AttributeError:
        return None
    report.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p)]
    report.restype = ctypes.c_int64
    names = ctypes.c_char_p()
    count = report(None, 0, ctypes.byref(names))
    values = (ctypes.c_int64 * count)()
    report(values, count, ctypes.byref(names))
    return dict(zip(names.value.decode().split(), values, strict=True))


def abi_mismatches(library: ctypes.CDLL, mirrors: Sequence[Mirror] = MIRRORS,
                   constants: dict[str, int] = CONSTANTS) -> list[str]:  # fmt: skip
    """Where ``mirrors`` and ``constants`` differ from the library's layout, one line per struct, field or constant,
    naming it; empty where they agree. A struct of the header that no mirror names is not checked."""
    layout = abi_layout(library)
    if layout is None:
        return ["the library reports no layout (oxygen_abi): built from other sources"]
    mismatches = []
    for name, value in constants.items():
        if f"const.{name}" not in layout:
            mismatches.append(f"{name}: no such constant in the library")
        elif layout[f"const.{name}"] != value:
            mismatches.append(f"{name}: {value} here, {layout[f'const.{name}']} in the library")
    for mirror in mirrors:
        name = mirror.__name__
        if name not in layout:
            mismatches.append(f"{name}: no such struct in the library")
            continue
        if ctypes.sizeof(mirror) != layout[name]:
            mismatches.append(f"{name}: size {ctypes.sizeof(mirror)} here, {layout[name]} in the library")
        fields = {field: getattr(mirror, field).offset for field, *_ in mirror._fields_}
        c_fields = {key.split(".", 1)[1]: offset for key, offset in layout.items() if key.startswith(f"{name}.")}
        for field, offset in c_fields.items():
            if field not in fields:
                mismatches.append(f"{name}.{field}: missing here")
            elif fields[field] != offset:
                mismatches.append(f"{name}.{field}: offset {fields[field]} here, {offset} in the library")
        mismatches += [f"{name}.{field}: not in the library's struct" for field in fields if field not in c_fields]
    return mismatches
