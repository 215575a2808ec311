"""The sampler: greedy by default, or sampled with llama_ros' and transformers' controls.

Every row of a batch has its own settings and its own seeded generator, so a seeded request draws the same tokens
whatever it is batched with.  The controls apply in transformers' order (repetition penalty on the prompt and the
tokens so far, then temperature, top-k, top-p, min-p), and each is the same computation as transformers' logits
processor of that name, so the distribution a row samples from is theirs (tested on fixed logits).
"""

import torch

from oxygen_ros.engine.sampling_params import SamplingParams

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
    penalty if positive, multiplied by it if negative. Ids without a logit (a VLA's image placeholder, the
    vocabulary's size) are no token it could repeat."""
    seen_ids = sorted(t for t in set(tokens) if 0 <= t < logits.shape[-1])
    if not seen_ids:
        return logits
    seen = torch.tensor(seen_ids, device=logits.device)
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
