"""Sampling parameters and the sampler: greedy by default, or sampled with llama_ros' and transformers' controls.

Every row of a batch has its own settings and its own seeded generator, so a seeded request draws the same tokens
whatever it is batched with.  The controls apply in transformers' order (repetition penalty on the prompt and the
tokens so far, then temperature, top-k, top-p, min-p), and each is the same computation as transformers' logits
processor of that name, so the distribution a row samples from is theirs (tested on fixed logits).
"""

import math
from dataclasses import dataclass, field

import torch

from oxygen_ros.errors import EngineError, ErrorCode

MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
MAX_SEED = 2**63 - 1


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


def sample(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None],
    histories: list[list[int]] | None = None,
) -> list[int]:
    """One token per row of ``logits`` [n, vocab]; greedy rows take the argmax (after any repetition penalty), the
    others draw from ``distribution``.  ``histories[i]``: row i's prompt and answer so far (for the penalty)."""
    penalized = [i for i, p in enumerate(params) if p.repetition_penalty != 1.0]
    if penalized:
        logits = logits.clone()
        for i in penalized:
            logits[i] = repetition_penalty(logits[i], histories[i], params[i].repetition_penalty)
    out = logits.argmax(dim=-1).tolist()
    for i, p in enumerate(params):
        if not p.greedy:
            out[i] = int(torch.multinomial(distribution(logits[i], p), 1, generator=generators[i]))
    return out


def repetition_penalty(logits: torch.Tensor, tokens: list[int], penalty: float) -> torch.Tensor:
    """transformers' RepetitionPenaltyLogitsProcessor on one row: the logit of every token seen is divided by the
    penalty if positive, multiplied by it if negative."""
    if not tokens:
        return logits
    seen = torch.tensor(sorted(set(tokens)), device=logits.device)
    score = logits[seen]
    return logits.scatter(0, seen, torch.where(score < 0, score * penalty, score / penalty))


def distribution(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """The probabilities a sampled row draws from: temperature, then top-k, top-p and min-p filtering, each as
    transformers' warper of that name (at least one token always stays)."""
    scores = logits.float() / p.temperature
    if p.top_k:
        kth = torch.topk(scores, min(p.top_k, scores.shape[-1])).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if p.top_p < 1.0:
        ascending, order = torch.sort(scores)
        remove = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - p.top_p
        remove[-1] = False
        scores = scores.masked_fill(remove.scatter(0, order, remove), float("-inf"))
    if p.min_p > 0.0:
        probs = scores.softmax(dim=-1)
        remove = probs < p.min_p * probs.max()
        remove[probs.argmax()] = False
        scores = scores.masked_fill(remove, float("-inf"))
    return scores.softmax(dim=-1)
