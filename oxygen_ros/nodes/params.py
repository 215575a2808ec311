"""The inference node's parameters: every EngineConfig field plus the node's own, each with a description, a type
and, for numbers, a range.

ROS-free on purpose, so presets (nodes/presets.py) and the node check values by the same rules: the node declares
each name with its type and range (nodes/inference_params.py: rclpy refuses a wrong type or an out-of-range value,
saying why) and hands the values here at configure time, where the finer rules (a power of two, a known format,
one value that needs another) make a clear configure FAILURE. Engine fields are declared straight from EngineConfig,
so a field added there is a parameter here without a second list to keep in sync (a missing description or range
is caught by the tests).
"""

import array
import math
from dataclasses import MISSING, dataclass, fields
from typing import Any, get_type_hints

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.sampling import MAX_SEED, SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes import bounds
from oxygen_ros.observations import RING_BYTES

INT64_MAX = (1 << 63) - 1  # ROS integer parameters are 64-bit


@dataclass
class NodeParams:
    camera_topic: str = "camera/image_raw"
    observation_topic: str = "oxygen/observation"
    observation_ring: int = 8
    observation_keep_s: float = 5.0
    observation_ring_bytes: int = RING_BYTES
    max_prompt_chars: int = bounds.PROMPT_CHARS
    eager_prefill: bool = False
    stats_rate_hz: float = 2.0
    marker_frame_id: str = "map"
    marker_max_cubes: int = 1024
    pool_warn_fraction: float = 0.9
    action_period_s: float = 0.02
    frame_pacing: bool = True
    decode_steps_per_frame: int = 0
    allow_random_weights: bool = False
    # sampling defaults for the Sampling fields a request leaves at their message defaults (greedy unless set)
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def sampling_defaults(self) -> SamplingParams:
        """What a request's unset Sampling fields become (its seed -1 stays the engine's: ``seed``)."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p,
                              repetition_penalty=self.repetition_penalty)  # fmt: skip

    def validate(self) -> None:
        def bad(msg: str) -> EngineError:
            return EngineError(ErrorCode.INVALID_ARGUMENT, msg)

        for name in ("camera_topic", "observation_topic", "marker_frame_id"):
            if not getattr(self, name):
                raise bad(f"{name} must not be empty")
        if self.observation_ring < 1:
            raise bad(f"observation_ring must be at least 1, got {self.observation_ring}")
        if not (math.isfinite(self.observation_keep_s) and self.observation_keep_s >= 0):
            raise bad(f"observation_keep_s must be a number of seconds >= 0, got {self.observation_keep_s}")
        for name in ("observation_ring_bytes", "max_prompt_chars"):
            if getattr(self, name) < 1:
                raise bad(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("marker_max_cubes", "decode_steps_per_frame"):
            if getattr(self, name) < 0:
                raise bad(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("stats_rate_hz", "action_period_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise bad(f"{name} must be a positive number, got {value}")
        if not 0.0 < self.pool_warn_fraction <= 1.0:
            raise bad(f"pool_warn_fraction must be in (0, 1], got {self.pool_warn_fraction}")
        self.sampling_defaults().check()  # the engine's own rules for a request's controls


DESCRIPTIONS: dict[str, str] = {
    # EngineConfig
    "model": "smollm2-135m, a random-weight pi0.5 (pi05-random-tiny/full, pi05-causal-tiny/full), or a folder: "
    "Hugging Face Llama/Qwen2 or Idefics3, pi0 / pi0.5 (LeRobot or transformers layout)",
    "device": "auto (CUDA when present, else CPU), cpu, cuda or cuda:N",
    "dtype": "compute dtype: auto (float32 on CPU, bfloat16 on CUDA), float32, float16 or bfloat16",
    "weight_dtype": "stored format of the decoder layers' projection weights (the LM head stays in dtype): auto (= "
    "dtype), or bfloat16 under float32 compute on a CPU (half the bytes, oneDNN's bf16 products: faster, lossy; "
    "docs/benchmarks.md measures it)",
    "block_size": "tokens per KV block (a power of two)",
    "kv_cache_bytes": "KV pool budget in bytes; 0 = use kv_cache_memory_fraction",
    "kv_cache_memory_fraction": "KV pool share of free device memory (CUDA) or available RAM (CPU)",
    "kv_dtype": "KV storage dtype: auto (= compute dtype), fp32, fp16, bf16, int8 or fp8",
    "kv_full_precision_layers": "layer indices whose KV stays at compute precision (integer list)",
    "kv_observation_dtype": "KV storage of observation prefixes (image tokens, the scene text) that every task "
    "shares; empty = the task's format",
    "kv_task_dtypes": "per task type KV storage, a string list of type=dtype (e.g. navigation=int8); others use "
    "kv_dtype; formats mix in one pool under one budget",
    "max_num_seqs": "requests decoding together",
    "max_model_len": "prompt + generated tokens per request",
    "max_num_batched_tokens": "tokens per forward pass; longer prefills continue in the next step",
    "max_queue": "waiting requests beyond this are answered RESOURCE_EXHAUSTED",
    "enable_prefix_caching": "reuse KV blocks of identical prefixes across requests and tasks",
    "seed": "weight init of random-weight models and the default sampling seed",
    "num_denoise_steps": "flow-matching steps per action chunk (VLA models); 0 = the checkpoint's num_inference_steps "
    "(config.json), 10 for the random-weight VLAs",
    "debug_checks": "check the pool's invariants after every step (slow; for tests)",
    "eviction_policy": "which cached KV blocks go first: attention (alpha * activity + (1 - alpha) * recency) or lru",
    "eviction_alpha": "weight of attention activity against recency in the attention eviction policy, in [0, 1]",
    "eviction_history_window": "decode steps of attention mass that count as a block's activity",
    "cpu_tier_bytes": "L1 host-memory KV tier in bytes (pinned on CUDA); evicted blocks are demoted there; 0 = off",
    "cpu_tier_format": "L1 storage: int8 (float KV compressed to int8 with scales) or pool (the pool's format, exact)",
    "disk_tier_path": "L2 disk KV tier folder (zstd files named by block hash; survives restarts); empty = off",
    "disk_tier_bytes": "L2 size bound in bytes; least recently used files are deleted beyond it",
    "prefetch_degree": "disk blocks of a prefix chain read ahead on the prefetch thread while one is restored",
    "preemption_mode": "a preempted request's KV: swap (to the lossless L1 tier), recompute, or auto (whichever the "
    "measured swap bytes/s and recompute tokens/s say is cheaper, per request)",
    "reuse_similarity_threshold": "approximate observation reuse: serve a frame from a recent one's KV when their "
    "thumbnails differ by less than this (mean abs difference, 0..1); 0 = off",
    # NodeParams
    "camera_topic": "sensor_msgs/Image input (sensor-data QoS); each frame becomes an observation",
    "observation_topic": "oxygen_ros/Observation input (text + images + state, e.g. from a scene describer)",
    "observation_ring": "recent observations addressable by observation_id (at least this many)",
    "observation_keep_s": "an observation stays addressable at least this long, seconds, whatever the camera rate "
    "(within observation_ring_bytes)",
    "observation_ring_bytes": "bound on the kept observations' images, text and state; past it the oldest go first, "
    "the newest always stays",
    "max_prompt_chars": "longest Infer.prompt and Observation.text, characters (OUT_OF_RANGE beyond)",
    "eager_prefill": "prefill each new observation at once, so the first question about it reuses its prefix",
    "stats_rate_hz": "rate of /oxygen/pool_stats, /oxygen/pool_markers and /oxygen/pool_image",
    "marker_frame_id": "frame_id of /oxygen/pool_markers (set rviz's fixed frame to it)",
    "marker_max_cubes": "pools with more blocks are drawn as one CUBE_LIST marker instead of one CUBE per block",
    "pool_warn_fraction": "/diagnostics turns WARN when this fraction of the pool's blocks is in use",
    "action_period_s": "time between consecutive steps of an action chunk (ActionChunk.period_s), seconds",
    "frame_pacing": "hold language steps that would delay the next chunk of an action stream (period learned from arrivals)",
    "decode_steps_per_frame": "with frame_pacing: language steps between two action chunks; 0 = as many as fit",
    "allow_random_weights": "serve action chunks from a random-weight model (pi05-random-*, pi05-causal-*): simulation and "
    "tests only; false refuses them FAILED_PRECONDITION, so noise never reaches an arm",
    "temperature": "sampling default for a request whose Sampling.temperature is 0: 0 = greedy, > 0 samples",
    "top_p": "sampling default for a request whose Sampling.top_p is 1 (off): nucleus mass kept, in (0, 1]",
    "top_k": "sampling default for a request whose Sampling.top_k is 0 (off): most likely tokens kept; 0 = off",
    "min_p": "sampling default for a request whose Sampling.min_p is 0 (off): drop tokens below min_p x the top one",
    "repetition_penalty": "sampling default for a request whose Sampling.repetition_penalty is 1 (off); > 1 "
    "discourages repeats",
}

# (lowest, highest), both allowed, of every number: the declared ParameterDescriptor ranges, also checked for presets.
# The rules above are finer (open ends, powers of two); these bound what sizes memory, loops and waits.
RANGES: dict[str, tuple[float, float]] = {
    "block_size": (1, 1024),
    "kv_cache_bytes": (0, INT64_MAX),
    "kv_cache_memory_fraction": (0.0, 1.0),
    "max_num_seqs": (1, 4096),
    "max_model_len": (1, 1 << 20),
    "max_num_batched_tokens": (1, 1 << 20),
    "max_queue": (1, 1 << 16),
    "seed": (0, MAX_SEED),
    "num_denoise_steps": (0, 1000),  # 0 = the checkpoint's
    "eviction_alpha": (0.0, 1.0),
    "eviction_history_window": (1, 1 << 20),
    "cpu_tier_bytes": (0, INT64_MAX),
    "disk_tier_bytes": (1, INT64_MAX),
    "prefetch_degree": (0, 64),
    "reuse_similarity_threshold": (0.0, 1.0),
    "observation_ring": (1, 10_000),
    "observation_keep_s": (0.0, 3600.0),
    "observation_ring_bytes": (1, 1 << 40),
    "max_prompt_chars": (1, 1 << 24),
    "stats_rate_hz": (0.0, 100.0),
    "marker_max_cubes": (0, 1 << 20),
    "pool_warn_fraction": (0.0, 1.0),
    "action_period_s": (0.0, 60.0),
    "decode_steps_per_frame": (0, 1 << 16),
    "temperature": (0.0, 100.0),
    "top_p": (0.0, 1.0),
    "top_k": (0, 1 << 24),
    "min_p": (0.0, 1.0),
    "repetition_penalty": (0.0, 100.0),
}


def types() -> dict[str, Any]:
    """Every parameter name with its type (str, int, float, bool, list[int], list[str])."""
    return get_type_hints(EngineConfig) | get_type_hints(NodeParams)


def defaults() -> dict[str, Any]:
    """Every parameter name with its default value (what the node declares)."""
    out = {}
    for cls in (EngineConfig, NodeParams):
        for f in fields(cls):
            out[f.name] = f.default_factory() if f.default is MISSING else f.default
    return out


def coerce(name: str, value: Any, kind: Any) -> Any:
    """The value as ``kind`` (str, int, float, bool, list[int], list[str]); ints are accepted where floats are
    expected."""
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
        list[int]: isinstance(value, list | tuple | array.array) and all(type(v) is int for v in value),
        list[str]: isinstance(value, list | tuple) and all(isinstance(v, str) for v in value),
    }
    if kind not in ok:  # a new EngineConfig field of another type: configure fails and says so
        raise EngineError(ErrorCode.INTERNAL, f"parameter {name} has a type the node cannot read: {kind}")
    if not ok[kind]:
        expected = getattr(kind, "__name__", str(kind))
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"parameter {name} must be {expected}, got {value!r}")
    return list(value) if kind in (list[int], list[str]) else kind(value)


def parse(values: dict[str, Any]) -> tuple[EngineConfig, NodeParams]:
    """EngineConfig and NodeParams from raw parameter values (every name in ``defaults()``); EngineError
    INVALID_ARGUMENT (or FAILED_PRECONDITION, e.g. cuda without CUDA) saying which parameter is wrong."""
    hints = types()
    engine_config, node_params = (
        cls(**{f.name: coerce(f.name, values[f.name], hints[f.name]) for f in fields(cls)})
        for cls in (EngineConfig, NodeParams)
    )
    engine_config.validate()
    node_params.validate()
    typed = vars(engine_config) | vars(node_params)
    for name, (low, high) in RANGES.items():
        if not low <= typed[name] <= high:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{name} must be in [{low}, {high}], got {typed[name]}")
    return engine_config, node_params
