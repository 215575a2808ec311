"""The inference node's parameters: every EngineConfig field plus the node's own, each described once with its type
and, for numbers, its range (``fields.setting``).

ROS-free and torch-free on purpose, so presets (nodes/presets.py, read by a robot's `ros2 launch`) and the node check
values by the same rules: the node declares each name with its type and range (nodes/inference_params.py: rclpy
refuses a wrong type or an out-of-range value, saying why) and hands the values here at configure time, where the
finer rules (a power of two, a known format, one value that needs another) make a clear configure FAILURE. Engine
fields are declared straight from EngineConfig, so a field added there is a parameter here without a second list to
keep in sync (a field made without ``setting`` is caught at import).
"""

import array
import os
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, get_type_hints

from oxygen_ros import bounds
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.fields import check_bounds, described, setting


@dataclass
class NodeParams:
    camera_topic: str = setting("camera/image_raw", "sensor_msgs/Image input (sensor-data QoS), or sensor_msgs/"
                                "CompressedImage when it ends in /compressed (a remote inference node); each frame "
                                "becomes an observation")  # fmt: skip
    observation_topic: str = setting("oxygen/observation", "oxygen_ros/Observation input (text + images + state, "
                                     "e.g. from a scene describer)")  # fmt: skip
    robots: list[str] = setting(
        [], "namespaces of the robots this node serves (a fleet on one inference node): each one's camera_topic and "
        "observation_topic are subscribed under it and its observations kept apart, requests name theirs in "
        "Infer.robot; [] = one robot, the topics as they resolve in the node's own namespace",
    )  # fmt: skip
    camera_sets_only: bool = setting(
        False, "a VLA request reads only observation_node's keyed camera sets, never a raw camera frame: set it where "
        "observation_node runs (a raw frame fills one camera's slot, the others masked; without it raw frames serve "
        "until its first set comes)",
    )  # fmt: skip
    observation_ring: int = setting(8, "recent observations addressable by observation_id (at least this many)",
                                    (1, 10_000))  # fmt: skip
    observation_keep_s: float = setting(
        5.0, "an observation stays addressable at least this long, seconds, whatever the camera rate (within "
        "observation_ring_bytes)", (0.0, 3600.0),
    )  # fmt: skip
    observation_ring_bytes: int = setting(
        bounds.OBSERVATION_RING_BYTES, "bound on the kept observations' images, text and state; past it the oldest go first, the newest "
        "always stays", (1, 1 << 40),
    )  # fmt: skip
    inflight_image_bytes: int = setting(
        bounds.INFLIGHT_IMAGE_BYTES, "bound on the images the requests in flight carry inline (their data and RGB "
        "copies) until answered; past it a request is refused RESOURCE_EXHAUSTED, unless it is the only one",
        (1, 1 << 40),
    )  # fmt: skip
    max_prompt_chars: int = setting(bounds.PROMPT_CHARS, "longest Infer.prompt and Observation.text, characters "
                                    "(OUT_OF_RANGE beyond)", (1, 1 << 24))  # fmt: skip
    eager_prefill: bool = setting(False, "prefill each new observation at once, so the first question about it "
                                  "reuses its prefix")  # fmt: skip
    stats_rate_hz: float = setting(2.0, "rate of /oxygen/pool_stats, /oxygen/pool_markers and /oxygen/pool_image",
                                   (0.0, 100.0), low_open=True)  # fmt: skip
    marker_frame_id: str = setting("map", "frame_id of /oxygen/pool_markers (set rviz's fixed frame to it)")
    marker_max_cubes: int = setting(1024, "pools with more blocks are drawn as one CUBE_LIST marker instead of one "
                                    "CUBE per block", (0, 1 << 20))  # fmt: skip
    pool_warn_fraction: float = setting(0.9, "/diagnostics turns WARN when this fraction of the pool's blocks is in "
                                        "use", (0.0, 1.0), low_open=True)  # fmt: skip
    action_period_s: float = setting(0.02, "time between consecutive steps of an action chunk "
                                     "(ActionChunk.period_s), seconds", (0.0, 60.0), low_open=True)  # fmt: skip
    frame_pacing: bool = setting(True, "hold language steps that would delay the next chunk of an action stream "
                                 "(period learned from arrivals)")  # fmt: skip
    decode_steps_per_frame: int = setting(0, "with frame_pacing: language steps between two action chunks; 0 = as "
                                          "many as fit", (0, 1 << 16))  # fmt: skip
    allow_random_weights: bool = setting(
        False, "serve action chunks from a random-weight model (pi05-random-*, pi05-causal-*): simulation and tests "
        "only; false refuses them FAILED_PRECONDITION, so noise never reaches an arm",
    )  # fmt: skip
    num_threads: int = setting(
        0, "CPU threads of the model's compute (torch and the C kernels); 0 = half the CPU cores this process may "
        "use, at least 1, leaving the rest to the robot's own nodes", (0, 1024),
    )  # fmt: skip
    # sampling defaults for the Sampling fields a request leaves at their message defaults (greedy unless set)
    temperature: float = setting(0.0, "sampling default for a request whose Sampling.temperature is 0: 0 = greedy, "
                                 "> 0 samples", (0.0, 100.0))  # fmt: skip
    top_p: float = setting(1.0, "sampling default for a request whose Sampling.top_p is 1 (off): nucleus mass kept, "
                           "in (0, 1]", (0.0, 1.0), low_open=True)  # fmt: skip
    top_k: int = setting(0, "sampling default for a request whose Sampling.top_k is 0 (off): most likely tokens "
                         "kept; 0 = off", (0, 1 << 24))  # fmt: skip
    min_p: float = setting(0.0, "sampling default for a request whose Sampling.min_p is 0 (off): drop tokens below "
                           "min_p x the top one", (0.0, 1.0), high_open=True)  # fmt: skip
    repetition_penalty: float = setting(1.0, "sampling default for a request whose Sampling.repetition_penalty is 1 "
                                        "(off); > 1 discourages repeats", (0.0, 100.0))  # fmt: skip

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
        self.sampling_defaults().check()  # the engine's own rules for a request's controls (their messages)
        check_bounds(self)  # every span and choice

    def threads(self) -> int:
        """The compute threads ``num_threads`` asks for: itself, or half the CPUs this process may use."""
        return self.num_threads or max(1, available_cpus() // 2)


def available_cpus() -> int:
    """CPUs this process may use: its affinity, fewer under a cgroup v2 CPU quota (a container's, a Jetson
    service's cpu.max)."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota: the affinity is the bound
    return cpus


ABOUT = described(EngineConfig) | described(NodeParams)
DESCRIPTIONS: dict[str, str] = {name: about.text for name, about in ABOUT.items()}
# (lowest, highest), both allowed, of every number: the declared ParameterDescriptor ranges, also checked for presets.
RANGES: dict[str, tuple[float, float]] = {name: about.span for name, about in ABOUT.items() if about.span}


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
    return engine_config, node_params
