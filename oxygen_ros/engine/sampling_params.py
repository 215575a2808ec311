"""A request's sampling controls and their ranges (greedy by default). Apart from the sampler (``sampling``) and free
of torch, so the parameter table and model presets check a node's defaults without loading it."""

import math
from dataclasses import dataclass, field

from oxygen_ros.config import MAX_SEED
from oxygen_ros.errors import EngineError, ErrorCode

MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256


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
            ("temperature", math.isfinite(self.temperature) and self.temperature >= 0.0, "finite and >= 0"),
            ("top_p", 0.0 < self.top_p <= 1.0, "in (0, 1]"),
            ("top_k", self.top_k >= 0, ">= 0 (0 = off)"),
            ("min_p", 0.0 <= self.min_p < 1.0, "in [0, 1)"),
            ("repetition_penalty", math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0.0,
             "finite and > 0 (1 = off)"),
            ("seed", self.seed is None or 0 <= self.seed <= MAX_SEED, f"in [0, {MAX_SEED}]"),
            ("stop", len(self.stop) <= MAX_STOP_STRINGS and all(0 < len(s) <= MAX_STOP_CHARS for s in self.stop),
             f"at most {MAX_STOP_STRINGS} non-empty strings of at most {MAX_STOP_CHARS} characters"),
        )  # fmt: skip
        for name, ok, bound in checks:
            if not ok:
                raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{name} must be {bound}, got {getattr(self, name)!r}")
