"""Engine configuration: one dataclass, filled from ``config/oxygen.yaml`` (ROS parameters), a model preset or code.

Each field is described once, with its bounds (``fields.setting``); the inference node declares its parameters from
that, presets are checked by it, and ``validate`` adds the rules one span cannot say (a power of two, a format name,
one value that needs another). Free of torch (a robot's `ros2 launch` checks presets with it): the engine resolves
the device and dtypes (``engine.device``).
"""

import re
from dataclasses import dataclass, fields
from typing import Any

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.fields import check_bounds, setting
from oxygen_ros.formats import COMPUTE_DTYPES, kv_format_problem
from oxygen_ros.tasks import TASK_TYPES

INT64_MAX = (1 << 63) - 1  # ROS integer parameters are 64-bit
MAX_SEED = INT64_MAX  # a request's and the engine's sampling seed
DEFAULT_KV_BYTES = 512 << 20  # a fixed KV budget: never a share of a robot's memory unless asked
SYSTEM_PROMPT = "You are the assistant of a robot. Answer briefly and only from the observation."
SYSTEM_PROMPT_CHARS = 8192
DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


@dataclass
class EngineConfig:
    model: str = setting(
        "smollm2-135m",
        "smollm2-135m, a random-weight pi0.5 (pi05-random-tiny/full, pi05-causal-tiny/full), or a folder: "
        "Hugging Face Llama/Qwen2 or Idefics3, pi0 / pi0.5 (LeRobot or transformers layout)",
    )
    device: str = setting("auto", "auto (CUDA when present, else CPU), cpu, cuda or cuda:N")
    dtype: str = setting(
        "auto", "compute dtype: auto (float32 on CPU, bfloat16 on CUDA), float32, float16 or bfloat16",
        choices=("auto", *COMPUTE_DTYPES),
    )  # fmt: skip
    weight_dtype: str = setting(
        "auto",
        "stored format of the decoder layers' projection weights: auto (= dtype); under float32 compute on a CPU, "
        "bfloat16 (half the bytes, oneDNN's bf16 products, the LM head stays float32) or int8 (one scale per 32 "
        "weights of a row, 0.28 of the bytes for the layers and the LM head, the C kernels' products) or q4_1 (GGUF "
        "Q4_1 blocks, 0.16 of the bytes for the layers, the LM head int8: lossless over a Q4_1 or Q4_0 GGUF's own weights): "
        "faster, lossy on other weights; docs/benchmarks.md measures them",
        choices=("auto", *COMPUTE_DTYPES, "int8", "q4_1"),
    )
    block_size: int = setting(16, "tokens per KV block (a power of two)", (1, 1024))
    kv_cache_bytes: int = setting(
        DEFAULT_KV_BYTES,
        "KV pool budget in bytes (default 512 MiB, whatever the machine has); 0 = kv_cache_memory_fraction of free "
        "memory",
        (0, INT64_MAX),
    )
    kv_cache_memory_fraction: float = setting(
        0.7, "KV pool share of free device memory (CUDA) or available RAM (CPU), in (0, 1]; used only when "
        "kv_cache_bytes is 0", (0.0, 1.0), low_open=True,
    )  # fmt: skip
    kv_dtype: str = setting("auto", "KV storage dtype: auto (= compute dtype), fp32, fp16, bf16, int8 or fp8")
    kv_full_precision_layers: list[int] = setting([], "layer indices whose KV stays at compute precision")
    kv_observation_dtype: str = setting(
        "", "KV storage of observation prefixes (image tokens, the scene text) that every task shares; empty = the "
        "task's format",
    )  # fmt: skip
    kv_task_dtypes: list[str] = setting(
        [], "per task type KV storage, a string list of type=dtype (e.g. navigation=int8); others use kv_dtype; "
        "formats mix in one pool under one budget",
    )  # fmt: skip
    max_num_seqs: int = setting(64, "requests decoding together", (1, 4096))
    max_model_len: int = setting(4096, "prompt + generated tokens per request", (1, 1 << 20))
    max_num_batched_tokens: int = setting(
        4096, "tokens per forward pass; longer prefills continue in the next step", (1, 1 << 20)
    )
    max_queue: int = setting(256, "waiting requests beyond this are answered RESOURCE_EXHAUSTED", (1, 1 << 16))
    enable_prefix_caching: bool = setting(True, "reuse KV blocks of identical prefixes across requests and tasks")
    system_prompt: str = setting(
        SYSTEM_PROMPT, "leads a chat model's system turn in every prompt about an observation, before the observation "
        "text (a request's own system_prompt follows the observation, so tasks keep sharing its KV)",
    )  # fmt: skip
    seed: int = setting(0, "weight init of random-weight models and the default sampling seed", (0, MAX_SEED))
    num_denoise_steps: int = setting(
        0, "flow-matching steps per action chunk (VLA models); 0 = the checkpoint's num_inference_steps "
        "(config.json), 10 for the random-weight VLAs", (0, 1000),
    )  # fmt: skip
    debug_checks: bool = setting(False, "check the pool's invariants after every step (slow; for tests)")
    eviction_policy: str = setting(
        "attention",
        "which cached KV blocks go first: attention (alpha * activity + (1 - alpha) * recency) or lru",
        choices=("attention", "lru"),
    )
    eviction_alpha: float = setting(
        0.7, "weight of attention activity against recency in the attention eviction policy, in [0, 1]", (0.0, 1.0)
    )
    eviction_history_window: int = setting(
        1000, "decode steps of attention mass that count as a block's activity", (1, 1 << 20)
    )
    cpu_tier_bytes: int = setting(
        0, "L1 host-memory KV tier in bytes (pinned on CUDA); evicted blocks are demoted there; 0 = off",
        (0, INT64_MAX),
    )  # fmt: skip
    cpu_tier_format: str = setting(
        "int8", "L1 storage: int8 (float KV compressed to int8 with scales) or pool (the pool's format, exact)",
        choices=("int8", "pool"),
    )  # fmt: skip
    disk_tier_path: str = setting(
        "", "L2 disk KV tier folder (zstd files named by block hash; survives restarts); empty = off"
    )
    disk_tier_bytes: int = setting(
        1 << 30, "L2 size bound in bytes; least recently used files are deleted beyond it", (1, INT64_MAX)
    )
    prefetch_degree: int = setting(
        2, "disk blocks of a prefix chain read ahead on the prefetch thread while one is restored", (0, 64)
    )
    preemption_mode: str = setting(
        "auto",
        "a preempted request's KV: swap (to the lossless L1 tier), recompute, or auto (whichever the measured swap "
        "bytes/s and recompute tokens/s say is cheaper, per request)",
        choices=("auto", "swap", "recompute"),
    )
    kernel_backend: str = setting(
        "auto", "the KV kernels (paged decode, KV writes, block copies): auto (Triton on CUDA, torch elsewhere), "
        "torch, or triton (on a CPU the Triton interpreter: tests)", choices=("auto", "torch", "triton"),
    )  # fmt: skip
    cpu_kernels: bool = setting(True, "on a CPU, the C kernels (products, decode attention, element-wise steps, the "
                                "one-call decoder), built by the machine's C compiler; false = torch's ops")  # fmt: skip
    cpu_paged_decode: bool = setting(True, "on a CPU, decode attention by the C kernel reading an fp32 or int8 pool in "
                                     "place; false = shared-prefix attention in torch ops")  # fmt: skip
    cpu_decode_row: bool = setting(True, "on a CPU, a decode step of up to eight sequences (one token each) through "
                                   "the whole decoder stack in one C call; false = layer by layer")  # fmt: skip
    reuse_similarity_threshold: float = setting(
        0.0, "approximate observation reuse: serve a frame from a recent one's KV when their thumbnails differ by "
        "less than this (mean abs difference, in [0, 1)); 0 = off", (0.0, 1.0), high_open=True,
    )  # fmt: skip

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
        """INVALID_ARGUMENT naming the field when a value breaks its bounds or a rule below."""

        def bad(msg: str) -> EngineError:
            return EngineError(ErrorCode.INVALID_ARGUMENT, msg)

        # the rules that say more than a span first, then every span and choice
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise bad(f"block_size must be a power of two, got {self.block_size}")
        if not DEVICE.fullmatch(self.device):
            raise bad(f"device must be auto, cpu or cuda[:N], got {self.device!r}")
        check_bounds(self)
        if len(self.system_prompt) > SYSTEM_PROMPT_CHARS:
            raise bad(f"system_prompt has {len(self.system_prompt)} characters, more than {SYSTEM_PROMPT_CHARS}")
        if self.preemption_mode == "swap" and not self.cpu_tier_bytes:
            raise bad("preemption_mode swap needs the L1 tier: set cpu_tier_bytes > 0")
        for name, value in (("kv_dtype", self.kv_dtype), ("kv_observation_dtype", self.kv_observation_dtype or "auto"),
                            *(("kv_task_dtypes", d) for d in self.task_kv_dtypes().values())):  # fmt: skip
            if value != "auto" and kv_format_problem(value):
                raise bad(f"{name} must be auto or a KV storage format: {kv_format_problem(value)}")

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
