"""The names of compute dtypes and KV storage formats, as the configuration spells them. A leaf (no torch), so a
configuration is checked where torch is not importable; the engine and the kernels map the names to torch dtypes."""

COMPUTE_DTYPES = ("float32", "float16", "bfloat16")  # dtype and weight_dtype (which also takes int8, q4_1), besides auto
# KV storage names -> the torch dtype (by name) their codes are stored in
KV_FORMATS = {
    "fp32": "float32",
    "float32": "float32",
    "fp16": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "float8_e4m3fn": "float8_e4m3fn",
}


def kv_format_problem(name: str) -> str:
    """'' when ``name`` is a KV storage format (any case), else why not."""
    return "" if name.lower() in KV_FORMATS else f"unknown KV dtype {name!r}; expected one of {sorted(KV_FORMATS)}"
