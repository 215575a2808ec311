"""Engine configuration: one dataclass, filled from ``config/oxygen.yaml`` (ROS parameters) or from code."""

from dataclasses import dataclass, field, fields
from typing import Any

import torch

from oxygen_ros.engine.request import TASK_TYPES
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kernels import KVQuantSpec


@dataclass
class EngineConfig:
    model: str = "smollm2-135m"  # a registered name or a Hugging Face folder (Llama / Qwen2 family)
    device: str = "auto"  # auto = cuda when present, else cpu
    dtype: str = "auto"  # compute dtype; auto = float32 on CPU (token-exact vs references), bfloat16 on CUDA
    weight_dtype: str = "auto"  # layers' projections stored as; auto = dtype; bfloat16 under float32 on CPU: faster, lossy
    block_size: int = 16  # tokens per KV block
    kv_cache_bytes: int = 0  # KV pool budget in bytes; 0 = use kv_cache_memory_fraction
    kv_cache_memory_fraction: float = 0.7  # of free device memory (CUDA) or available RAM (CPU), after the model
    kv_dtype: str = "auto"  # KV storage: auto (= compute dtype), fp32, fp16, bf16, int8 or fp8
    kv_full_precision_layers: list[int] = field(default_factory=list)  # layers kept at compute precision
    kv_observation_dtype: str = ""  # KV of observation prefixes (images, scene text) shared by all tasks; "" = task's
    kv_task_dtypes: list[str] = field(default_factory=list)  # per task type, "type=dtype" (e.g. navigation=int8)
    max_num_seqs: int = 64  # requests decoding together
    max_model_len: int = 4096  # prompt + generated tokens per request
    max_num_batched_tokens: int = 4096  # tokens per forward pass (prefill chunks beyond it continue next step)
    max_queue: int = 256  # waiting requests beyond this are refused with RESOURCE_EXHAUSTED
    enable_prefix_caching: bool = True
    seed: int = 0  # model init for random-weight models and default sampling seed
    num_denoise_steps: int = 0  # flow-matching steps per action chunk (VLAs); 0 = the checkpoint's num_inference_steps
    debug_checks: bool = False  # run pool invariant checks after every step (tests)
    eviction_policy: str = "attention"  # attention (alpha * activity + (1 - alpha) * recency) | lru
    eviction_alpha: float = 0.7  # weight of attention activity vs recency in the attention policy
    eviction_history_window: int = 1000  # decode steps of attention mass that count as a block's activity
    cpu_tier_bytes: int = 0  # L1 host-memory KV tier; 0 = off
    cpu_tier_format: str = "int8"  # L1 storage: int8 (float layers compressed) | pool (the pool's format, exact)
    disk_tier_path: str = ""  # L2 disk KV tier folder; "" = off
    disk_tier_bytes: int = 1 << 30  # L2 size bound; least recently used files are deleted beyond it
    prefetch_degree: int = 2  # disk blocks of a prefix chain read ahead by the prefetch thread
    preemption_mode: str = "auto"  # a preempted request's KV: swap (to the L1 tier) | recompute | auto (cheaper)
    reuse_similarity_threshold: float = 0.0  # reuse a similar earlier frame's KV below this difference; 0 = off

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
        names = ("max_num_seqs", "max_model_len", "max_num_batched_tokens", "max_queue", "eviction_history_window",
                 "disk_tier_bytes")  # fmt: skip
        for name in names:
            if getattr(self, name) <= 0:
                raise bad(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_denoise_steps < 0:
            raise bad(f"num_denoise_steps must be >= 0 (0 = the checkpoint's), got {self.num_denoise_steps}")
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda"):
            raise bad(f"device must be auto, cpu or cuda[:N], got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"device {self.device!r} requested but CUDA is not available")
        resolve_dtype(self.dtype, torch.device("cpu"))
        if self.weight_dtype != "auto":
            resolve_dtype(self.weight_dtype, torch.device("cpu"), "weight_dtype")
        if self.eviction_policy not in ("attention", "lru"):
            raise bad(f"eviction_policy must be attention or lru, got {self.eviction_policy!r}")
        if not 0.0 <= self.eviction_alpha <= 1.0:
            raise bad(f"eviction_alpha must be in [0, 1], got {self.eviction_alpha}")
        if self.cpu_tier_bytes < 0 or self.prefetch_degree < 0:
            raise bad(f"cpu_tier_bytes and prefetch_degree must be >= 0, got {self.cpu_tier_bytes}, "
                      f"{self.prefetch_degree}")  # fmt: skip
        if self.cpu_tier_format not in ("int8", "pool"):
            raise bad(f"cpu_tier_format must be int8 or pool, got {self.cpu_tier_format!r}")
        if self.preemption_mode not in ("auto", "swap", "recompute"):
            raise bad(f"preemption_mode must be auto, swap or recompute, got {self.preemption_mode!r}")
        if self.preemption_mode == "swap" and not self.cpu_tier_bytes:
            raise bad("preemption_mode swap needs the L1 tier: set cpu_tier_bytes > 0")
        if not 0.0 <= self.reuse_similarity_threshold < 1.0:  # also rejects NaN
            raise bad(f"reuse_similarity_threshold must be in [0, 1), got {self.reuse_similarity_threshold}")
        for name, value in (("kv_dtype", self.kv_dtype), ("kv_observation_dtype", self.kv_observation_dtype or "auto"),
                            *(("kv_task_dtypes", d) for d in self.task_kv_dtypes().values())):  # fmt: skip
            if value != "auto":
                try:
                    KVQuantSpec.parse(value)
                except ValueError as exc:
                    raise bad(f"{name} must be auto or a KV storage format: {exc}") from exc

    def task_kv_dtypes(self) -> dict[str, str]:
        """``kv_task_dtypes`` as {task type: dtype}; raises INVALID_ARGUMENT on a malformed, unknown or repeated
        entry."""
        out: dict[str, str] = {}
        for entry in self.kv_task_dtypes:
            task_type, sep, dtype = entry.partition("=")
            task_type, dtype = task_type.strip(), dtype.strip()
            if not sep or task_type not in TASK_TYPES or task_type in out or not dtype:
                raise EngineError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"kv_task_dtypes entry {entry!r}: expected 'type=dtype' once per task type, type one of "
                    f"{list(TASK_TYPES)}",
                )
            out[task_type] = dtype
        return out

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_dtype(name: str, device: torch.device, field_name: str = "dtype") -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in _DTYPES:
        raise EngineError(ErrorCode.INVALID_ARGUMENT,
                          f"{field_name} must be auto or one of {sorted(_DTYPES)}, got {name!r}")  # fmt: skip
    return _DTYPES[name]
