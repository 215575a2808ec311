"""Engine configuration: one dataclass, filled from ``config/oxygen.yaml`` (ROS parameters) or from code."""

from dataclasses import dataclass, field, fields
from typing import Any

import torch

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kernels import KVQuantSpec


@dataclass
class EngineConfig:
    model: str = "smollm2-135m"  # a registered name or a Hugging Face folder (Llama / Qwen2 family)
    device: str = "auto"  # auto = cuda when present, else cpu
    dtype: str = "auto"  # compute dtype; auto = float32 on CPU (token-exact vs references), bfloat16 on CUDA
    block_size: int = 16  # tokens per KV block
    kv_cache_bytes: int = 0  # KV pool budget in bytes; 0 = use kv_cache_memory_fraction
    kv_cache_memory_fraction: float = 0.7  # of free device memory (CUDA) or available RAM (CPU), after the model
    kv_dtype: str = "auto"  # KV storage: auto (= compute dtype), fp32, fp16, bf16, int8 or fp8
    kv_full_precision_layers: list[int] = field(default_factory=list)  # layers kept at compute precision
    max_num_seqs: int = 64  # requests decoding together
    max_model_len: int = 4096  # prompt + generated tokens per request
    max_num_batched_tokens: int = 4096  # tokens per forward pass (prefill chunks beyond it continue next step)
    max_queue: int = 256  # waiting requests beyond this are refused with RESOURCE_EXHAUSTED
    enable_prefix_caching: bool = True
    seed: int = 0  # model init for random-weight models and default sampling seed
    num_denoise_steps: int = 10  # flow-matching steps per action chunk (VLA models)
    debug_checks: bool = False  # run pool invariant checks after every step (tests)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "EngineConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"unknown engine parameter(s) {unknown}; known: {sorted(known)}")
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        def bad(msg: str) -> EngineError:
            return EngineError(ErrorCode.INVALID_ARGUMENT, msg)

        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise bad(f"block_size must be a power of two, got {self.block_size}")
        if self.kv_cache_bytes < 0:
            raise bad(f"kv_cache_bytes must be >= 0, got {self.kv_cache_bytes}")
        if not 0.0 < self.kv_cache_memory_fraction <= 1.0:
            raise bad(f"kv_cache_memory_fraction must be in (0, 1], got {self.kv_cache_memory_fraction}")
        for name in ("max_num_seqs", "max_model_len", "max_num_batched_tokens", "max_queue", "num_denoise_steps"):
            if getattr(self, name) <= 0:
                raise bad(f"{name} must be positive, got {getattr(self, name)}")
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda"):
            raise bad(f"device must be auto, cpu or cuda[:N], got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"device {self.device!r} requested but CUDA is not available")
        resolve_dtype(self.dtype, torch.device("cpu"))
        if self.kv_dtype != "auto":
            try:
                KVQuantSpec.parse(self.kv_dtype)
            except ValueError as exc:
                raise bad(f"kv_dtype must be auto or a KV storage format: {exc}") from exc

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in _DTYPES:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"dtype must be auto or one of {sorted(_DTYPES)}, got {name!r}")
    return _DTYPES[name]
