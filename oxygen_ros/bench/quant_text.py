"""Teacher-forced scoring of a fixed public-domain text through the paged pool: perplexity and KL divergence.

The text is scored ``chunk`` tokens per forward pass: a chunk's tokens see each other's K/V as computed (in flight,
unquantized) and everything before the chunk as read back from the pool in the pool's format, so all but the last
``chunk`` tokens of every context are read quantized.  (One prefill of the whole text would attend to in-flight K/V
only and measure nothing.)  Besides perplexity, the mean KL divergence of the next-token distributions from the
full-precision ones is reported: perplexity changes of a few tenths of a percent go either way (they are the sum of
many small per-token gains and losses), while the KL is never negative and grows with the distortion. And the
teacher-forced top-1 agreement: the share of positions whose most likely next token is the full-precision one's.
Both are stable where greedy agreement is not: every position is scored in the same context, so one flipped near-tie
does not send the rest of a run down another text.
"""

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from oxygen_ros.engine.engine import Engine

TEXT_PATH = Path(__file__).with_name("data") / "declaration_of_independence.txt"  # public domain (1776)


def text_token_ids(engine: Engine, num_tokens: int) -> list[int]:
    """The first ``num_tokens`` tokens of the shipped text."""
    ids = engine.tokenizer.encode(TEXT_PATH.read_text())
    if len(ids) < num_tokens:
        raise ValueError(f"{TEXT_PATH.name} has {len(ids)} tokens, fewer than the {num_tokens} asked for")
    return ids[:num_tokens]


def teacher_forced_logprobs(engine: Engine, ids: list[int], chunk: int) -> torch.Tensor:
    """Log-probabilities of every next token, ``[len(ids) - 1, vocab]`` fp32 on the CPU, computed ``chunk`` tokens
    per forward pass over blocks taken from (and given back to) the engine's pool."""
    with text_in_pool(engine, ids, chunk) as (_, logprobs):
        return logprobs


@contextmanager
def text_in_pool(engine: Engine, ids: list[int], chunk: int) -> Iterator[tuple[list[int], torch.Tensor]]:
    """Score ``ids`` ``chunk`` tokens per forward pass into blocks from the engine's pool; yields (the blocks, the
    log-probabilities as ``teacher_forced_logprobs``) while the blocks still hold the text's K/V (all but the last
    token's), and gives the blocks back after."""
    bs, device, model = engine.config.block_size, engine.device, engine.bundle.model
    blocks = engine.pool.allocate(-(-len(ids) // bs))
    tokens = torch.tensor(ids, device=device)
    parts = []
    try:
        with torch.inference_mode():
            for start in tqdm(range(0, len(ids) - 1, chunk), desc=f"text {engine.layout.name}", unit="chunk",
                              leave=False):  # fmt: skip
                end = min(start + chunk, len(ids) - 1)  # positions start..end-1 predict tokens start+1..end
                ctx, positions = engine.kv.steps.batch([blocks], [start], [end - start], [0])
                logits = model.compute_logits(model(tokens[start:end], positions, ctx, engine.kv))
                parts.append(torch.log_softmax(logits.float(), dim=-1).cpu())
        yield blocks, torch.cat(parts)
    finally:
        engine.pool.release(blocks)


@dataclass(frozen=True)
class TextScore:
    """One layout's teacher-forced scores against the full-precision ones."""

    ppl_increase: float  # relative: exp(NLL) / exp(reference NLL) - 1
    kl: float  # mean KL(reference || this) of the next-token distributions, nats per token
    top1: float  # share of positions whose argmax next token equals the reference's


@dataclass(frozen=True)
class TextReference:
    """The full-precision scores of ``ids`` that other KV layouts are compared with."""

    ids: list[int]
    chunk: int
    logprobs: torch.Tensor
    nll: float  # mean next-token negative log-likelihood

    @classmethod
    def of(cls, engine: Engine, ids: list[int], chunk: int) -> "TextReference":
        logprobs = teacher_forced_logprobs(engine, ids, chunk)
        return cls(ids, chunk, logprobs, _mean_nll(logprobs, ids))

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)

    def score(self, engine: Engine) -> TextScore:
        """``engine``'s layout scored on the same text."""
        logprobs = teacher_forced_logprobs(engine, self.ids, self.chunk)
        kl = (self.logprobs.exp() * (self.logprobs - logprobs)).sum(dim=-1).mean()
        top1 = (logprobs.argmax(dim=-1) == self.logprobs.argmax(dim=-1)).float().mean()
        return TextScore(math.exp(_mean_nll(logprobs, self.ids) - self.nll) - 1.0, float(kl), float(top1))


def _mean_nll(logprobs: torch.Tensor, ids: list[int]) -> float:
    return float(-logprobs.gather(1, torch.tensor(ids[1:])[:, None]).mean())
