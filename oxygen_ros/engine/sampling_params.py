"""A request's sampling controls and their ranges (greedy by default). Apart from the sampler (``sampling``) and free
of torch, so the parameter table and model presets check a node's defaults without loading it."""

import struct
from dataclasses import dataclass, field

from oxygen_ros.config import MAX_SEED
from oxygen_ros.errors import EngineError, ErrorCode

MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
# A sampled row divides its logits by the temperature and scales repeated tokens' by the penalty: far from 1 they
# overflow fp32 to inf, softmax gives NaN and the draw fails for the whole batch. Below 0.01 the distribution is
# greedy's in all but name (vLLM clamps there too); above 100 it is flat. The lower bound is 0.01 as a float32
# (Sampling.msg's fields are float32: 0.01 sent arrives as 0.0099999998).
F32_HUNDREDTH = struct.unpack("f", struct.pack("f", 0.01))[0]
TEMPERATURE_RANGE = (F32_HUNDREDTH, 100.0)
PENALTY_RANGE = (F32_HUNDREDTH, 100.0)


@dataclass
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0  # nucleus: keep the most likely tokens whose probabilities sum to top_p; 1 = off
    top_k: int = 0  # keep the k most likely tokens; 0 = off
    min_p: float = 0.0  # drop tokens less likely than min_p times the most likely one; 0 = off
    repetition_penalty: float = 1.0  # > 1 discourages tokens already in the prompt or the answer; 1 = off
    seed: int | None = None  # per-request generator: the same seed gives the same text whatever the batch
    stop_token_ids: list[int] = field(default_factory=list)  # in addition to the model's end-of-turn tokens
    stop: list[str] = field(default_factory=list)  # stop strings: the answer ends before the first one it contains
    ignore_eos: bool = False  # benchmarks decode exactly max_new_tokens

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def check(self) -> None:
        """INVALID_ARGUMENT naming the field when a setting is out of its range (NaN included)."""
        checks = (
            ("max_new_tokens", self.max_new_tokens >= 1, "at least 1"),
            ("temperature", self.temperature == 0.0 or _within(self.temperature, TEMPERATURE_RANGE),
             f"0 (greedy) or in [{TEMPERATURE_RANGE[0]:g}, {TEMPERATURE_RANGE[1]:g}]"),
            ("top_p", 0.0 < self.top_p <= 1.0, "in (0, 1]"),
            ("top_k", self.top_k >= 0, ">= 0 (0 = off)"),
            ("min_p", 0.0 <= self.min_p < 1.0, "in [0, 1)"),
            ("repetition_penalty", _within(self.repetition_penalty, PENALTY_RANGE),
             f"in [{PENALTY_RANGE[0]:g}, {PENALTY_RANGE[1]:g}] (1 = off)"),
            ("seed", self.seed is None or 0 <= self.seed <= MAX_SEED, f"in [0, {MAX_SEED}]"),
            ("stop", len(self.stop) <= MAX_STOP_STRINGS and all(0 < len(s) <= MAX_STOP_CHARS for s in self.stop),
             f"at most {MAX_STOP_STRINGS} non-empty strings of at most {MAX_STOP_CHARS} characters"),
        )  # fmt: skip
        for name, ok, bound in checks:
            if not ok:
                raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{name} must be {bound}, got {getattr(self, name)!r}")


def _within(value: float, bounds: tuple[float, float]) -> bool:
    return bounds[0] <= value <= bounds[1]  # NaN is never within
