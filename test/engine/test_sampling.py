"""The sampler against transformers' logits processors on fixed logits (the distribution exactly, and draws from it
statistically), per-row settings in one batch, seeded reproducibility whatever the batch, and bad settings refused
naming the field."""

import pytest
import torch
from engine_helpers import make_engine
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling import distribution, repetition_penalty, sample
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode

VOCAB = 64
HISTORY = [3, 7, 7, 11, 40]
SETTINGS = [
    SamplingParams(temperature=0.7),
    SamplingParams(temperature=1.3, top_k=5),
    SamplingParams(temperature=0.9, top_p=0.8),
    SamplingParams(temperature=1.0, min_p=0.1),
    SamplingParams(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.3),
]


def _logits(seed: int = 0) -> torch.Tensor:
    return torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _transformers_probs(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """What transformers' generate samples from with these settings (its processors, in its order)."""
    processors = LogitsProcessorList()
    if p.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(p.repetition_penalty))
    processors.append(TemperatureLogitsWarper(p.temperature))
    if p.top_k:
        processors.append(TopKLogitsWarper(p.top_k))
    if p.top_p < 1.0:
        processors.append(TopPLogitsWarper(p.top_p))
    if p.min_p:
        processors.append(MinPLogitsWarper(p.min_p))
    return processors(torch.tensor([HISTORY]), logits[None].clone())[0].softmax(dim=-1)


@pytest.mark.parametrize("p", SETTINGS, ids=lambda p: f"t{p.temperature}-k{p.top_k}-p{p.top_p}-m{p.min_p}")
def test_distribution_is_transformers(p):
    logits = _logits()
    ours = distribution(repetition_penalty(logits, HISTORY, p.repetition_penalty), p)
    theirs = _transformers_probs(logits, p)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    assert int((theirs > 0).sum()) >= 1


@pytest.mark.parametrize("p", SETTINGS[1:3], ids=["top_k", "top_p"])
def test_draws_follow_the_distribution(p):
    """20000 draws through ``sample``: total-variation distance to transformers' distribution below 0.02 (its
    expected value here is about 0.01; a wrong filter or temperature gives 0.1 or more)."""
    logits = _logits(1)
    generator = torch.Generator().manual_seed(5)
    n = 20000
    draws = [sample(logits[None], [p], [generator])[0] for _ in range(n)]
    empirical = torch.bincount(torch.tensor(draws), minlength=VOCAB).double() / n
    tv = 0.5 * (empirical - _transformers_probs(logits, p).double()).abs().sum()
    assert tv < 0.02


def test_rows_keep_their_own_settings_and_seeds_whatever_the_batch():
    """A seeded row draws the same tokens alone and in a batch of rows with other settings; greedy rows (with or
    without a repetition penalty) take the argmax of their own penalized logits."""
    rows = torch.stack([_logits(s) / 3 for s in range(4)])  # flat enough that sampling shows
    settings = [SamplingParams(temperature=0.9, top_k=10, seed=1), SamplingParams(), SETTINGS[4],
                SamplingParams(repetition_penalty=2.0)]  # fmt: skip
    histories = [HISTORY] * 4

    def draw(indices: list[int]) -> list[list[int]]:
        generators = [torch.Generator().manual_seed(100 + i) for i in indices]
        return [sample(rows[indices], [settings[i] for i in indices], generators, [histories[i] for i in indices])
                for _ in range(20)]  # fmt: skip

    together = draw([0, 1, 2, 3])
    for i in range(4):
        assert [step[i] for step in together] == [step[0] for step in draw([i])]
    assert all(step[1] == int(rows[1].argmax()) for step in together)
    penalized = repetition_penalty(rows[3], HISTORY, 2.0)
    assert all(step[3] == int(penalized.argmax()) for step in together)
    assert len({step[0] for step in together}) > 1  # it samples


@pytest.mark.parametrize("field,value", [
    ("temperature", float("nan")), ("temperature", -0.1), ("top_p", 0.0), ("top_p", 1.5), ("top_k", -1),
    ("min_p", 1.0), ("repetition_penalty", 0.0), ("repetition_penalty", float("inf")), ("seed", -1),
    ("temperature", 1e-40), ("temperature", 1e3), ("repetition_penalty", 1e-40), ("repetition_penalty", 1e3),
    ("max_new_tokens", 0), ("stop", [""]), ("stop", ["x" * 300]), ("stop", ["a"] * 17),
])  # fmt: skip
def test_bad_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(EngineError) as err:
        SamplingParams(**{field: value}).check()
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and err.value.message.startswith(field)


def test_the_engine_cuts_at_a_stop_string_and_samples_seeded_rows_alike_batched(smollm2_bundle):
    """Through the engine on SmolLM2: a stop string ends the answer before it; a seeded request with every control
    set gives the same tokens alone and batched with a request of other settings."""
    engine = make_engine(smollm2_bundle)
    stop = SamplingParams(max_new_tokens=20, stop=["Paris"])
    out = engine.generate([GenerateRequest("What is the capital of France?", sampling=stop)])[0]
    assert out.text == "The capital of France is " and out.finish_reason == "stop"
    seeded = SamplingParams(max_new_tokens=12, temperature=0.8, top_k=20, top_p=0.9, min_p=0.02,
                            repetition_penalty=1.2, seed=7, ignore_eos=True)  # fmt: skip
    other = SamplingParams(max_new_tokens=12, temperature=1.3, seed=3, ignore_eos=True)
    alone = engine.generate([GenerateRequest("Tell me about robots.", sampling=seeded)])[0]
    batched = engine.generate([GenerateRequest("Tell me about robots.", sampling=seeded),
                               GenerateRequest("Name a color.", sampling=other)])[0]  # fmt: skip
    assert alone.token_ids == batched.token_ids and len(set(alone.token_ids)) > 3
    engine.check_invariants()
