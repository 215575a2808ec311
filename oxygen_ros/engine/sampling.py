"""Sampling parameters and the sampler: greedy, or temperature + top-p with a per-request seeded generator."""

from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None  # per-request generator: the same seed gives the same text whatever the batch
    stop_token_ids: list[int] = field(default_factory=list)  # in addition to the model's end-of-turn tokens
    ignore_eos: bool = False  # benchmarks decode exactly max_new_tokens

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]) -> list[int]:
    """One token per row of ``logits`` [n, vocab]; greedy rows take argmax, the others sample."""
    out = logits.argmax(dim=-1).tolist()
    for i, p in enumerate(params):
        if p.greedy:
            continue
        probs = torch.softmax(logits[i].float() / p.temperature, dim=-1)
        if p.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            keep = sorted_probs.cumsum(0) - sorted_probs < p.top_p  # always keeps the most likely token
            sorted_probs = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        out[i] = int(torch.multinomial(probs, 1, generator=generators[i]).item())
    return out
