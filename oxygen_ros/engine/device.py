"""Where the engine runs and in which dtypes: the configuration's names (``config``) made torch objects, checked
against this machine (a CUDA device asked for where there is none is FAILED_PRECONDITION)."""

import torch

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kernels.cpu_matvec import QUANTIZED_WEIGHTS

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def torch_device(name: str) -> torch.device:
    """``auto`` = CUDA when present, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise EngineError(ErrorCode.FAILED_PRECONDITION, f"device {name!r} requested but CUDA is not available")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device, field_name: str = "dtype") -> torch.dtype:
    """``auto`` = bfloat16 on CUDA, float32 elsewhere (token for token equal to the references on a CPU)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise EngineError(ErrorCode.INVALID_ARGUMENT,
                          f"{field_name} must be auto or one of {sorted(DTYPES)}, got {name!r}")  # fmt: skip
    return DTYPES[name]


def resolve_weight_dtype(name: str, device: torch.device, compute: torch.dtype) -> torch.dtype:
    """``weight_dtype``: ``auto`` = the compute dtype; ``int8`` (scales per 32 weights of a row, CPU) and ``q4_1``
    (GGUF Q4_1 blocks, stored as uint8) beside the float formats."""
    if name == "auto":
        return compute
    return QUANTIZED_WEIGHTS[name] if name in QUANTIZED_WEIGHTS else resolve_dtype(name, device, "weight_dtype")
