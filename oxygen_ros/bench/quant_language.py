"""Language-side measurements of a quantized KV pool (SmolLM2): greedy agreement with full precision, and the
teacher-forced text scores of ``quant_text``.

Greedy decoding reads every context token back from the pool at every step, so it sees the format throughout.
Agreement is counted per prompt up to the first divergence: after it the two runs continue different texts and
their later tokens are not comparable.
"""

import math
from dataclasses import dataclass

from tqdm import tqdm

from oxygen_ros.bench.quant_text import TextReference, text_token_ids
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.models.registry import ModelBundle

# Open questions whose answers run past 64 tokens, so greedy runs compare real text rather than post-EOS chatter.
PROMPTS = [
    "Explain how a robot vacuum cleaner decides where to go next.",
    "Describe the water cycle in a few paragraphs.",
    "Write a short story about a robot that learns to cook.",
    "What are the main differences between a cat and a dog as pets?",
    "Explain what a neural network is to a ten year old.",
    "Give five tips for keeping a kitchen clean and tidy.",
    "Describe a walk through a busy market in the morning.",
    "Why do leaves change color in autumn? Explain in detail.",
    "Write a letter to a friend about a trip to the mountains.",
    "Explain how a bicycle stays upright while moving.",
    "What should a robot check before picking up a glass of water?",
    "Describe the steps to plant a tree in a garden.",
    "Explain why the sky is blue and sunsets are red.",
    "Write a poem about a lighthouse in a storm.",
    "How does a refrigerator keep food cold? Explain the physics.",
    "Describe the layout of a typical home kitchen for a new robot.",
    "Explain the rules of chess to a beginner.",
    "What are the benefits of regular exercise? List and explain them.",
    "Write a product description for a smart coffee mug.",
    "Explain how a map app finds the fastest route home.",
    "Describe what happens inside a volcano before it erupts.",
    "Give a recipe for pancakes with step by step instructions.",
    "Explain how to safely hand a pair of scissors to a person.",
    "Write a short history of the printing press.",
]


@dataclass
class Agreement:
    """Greedy agreement with the full-precision run: ``token_agreement`` is the fraction of positions before each
    prompt's first divergence (positions after it are not comparable: the contexts differ), ``prompts_identical``
    the fraction of prompts with no divergence at all."""

    token_agreement: float
    prompts_identical: float
    first_divergence: list[int | None]  # per prompt: index of the first differing token, None if identical


def agreement(reference: list[list[int]], tokens: list[list[int]]) -> Agreement:
    """Compare per prompt token lists of equal lengths (``ignore_eos`` runs)."""
    first: list[int | None] = []
    matched = total = 0
    for ref, got in zip(reference, tokens, strict=True):
        diverge = next((i for i, (a, b) in enumerate(zip(ref, got, strict=True)) if a != b), None)
        first.append(diverge)
        matched += len(ref) if diverge is None else diverge
        total += len(ref)
    return Agreement(matched / total, sum(d is None for d in first) / len(first), first)


def greedy_tokens(engine: Engine, prompts: list[str], new_tokens: int, label: str) -> list[list[int]]:
    """Greedy continuations of ``prompts`` (chat-formatted), exactly ``new_tokens`` each, decoded as one batch."""
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    return generate_tokens(engine, [GenerateRequest(p, sampling=sampling) for p in prompts], label)


def generate_tokens(engine: Engine, requests: list[GenerateRequest], label: str) -> list[list[int]]:
    """The output tokens of ``requests``, decoded as one batch, with a progress bar."""
    ids = [engine.submit(r) for r in requests]
    done: dict[str, list[int]] = {}
    total = sum(r.sampling.max_new_tokens for r in requests)
    with tqdm(total=total, desc=f"greedy {label}", unit="tok", leave=False) as bar:
        while engine.has_unfinished:
            done.update({out.request_id: out.token_ids for out in engine.step()})
            running = sum(len(r.output_token_ids) for r in engine.active_requests())
            bar.update(sum(map(len, done.values())) + running - bar.n)
    return [done[i] for i in ids]


@dataclass
class LanguageQuality:
    """One KV layout against the full-precision run."""

    kv_dtype: str
    full_precision_layers: tuple[int, ...]
    layout: str  # KVLayout.name, e.g. "int8" or "fp8(fp32:3,7)"
    ppl_increase: float  # relative: exp(NLL) / exp(reference NLL) - 1
    kl_divergence: float  # mean KL(full precision || this) of next-token distributions, nats per token
    agreement: Agreement | None  # None: not run, the perplexity alone already missed its target


class LanguageBench:
    """SmolLM2 measured through engines that differ only in KV layout; holds the full-precision reference run."""

    def __init__(
        self, bundle: ModelBundle, prompts: list[str], new_tokens: int, text_tokens: int, chunk: int,
        block_size: int = 16, kv_cache_bytes: int = 256 << 20,
    ) -> None:
        self.bundle, self.prompts, self.new_tokens, self.chunk = bundle, prompts, new_tokens, chunk
        self.block_size, self.kv_cache_bytes = block_size, kv_cache_bytes
        reference = self.engine("auto")
        self.text = TextReference.of(reference, text_token_ids(reference, text_tokens), chunk)
        self.reference_tokens = greedy_tokens(reference, prompts, new_tokens, "reference")

    def engine(self, kv_dtype: str, full_precision_layers: tuple[int, ...] = ()) -> Engine:
        config = EngineConfig(
            kv_dtype=kv_dtype, kv_full_precision_layers=list(full_precision_layers), block_size=self.block_size,
            kv_cache_bytes=self.kv_cache_bytes, max_num_seqs=len(self.prompts),
        )
        return Engine(config, bundle=self.bundle)

    def measure(
        self, kv_dtype: str, full_precision_layers: tuple[int, ...] = (), greedy_below_ppl: float = math.inf
    ) -> LanguageQuality:
        """Text scores, then greedy agreement unless the perplexity increase is already >= ``greedy_below_ppl``."""
        engine = self.engine(kv_dtype, full_precision_layers)
        name = engine.layout.name
        quality = LanguageQuality(kv_dtype, full_precision_layers, name, *self.text.score(engine), None)
        if quality.ppl_increase < greedy_below_ppl:
            tokens = greedy_tokens(engine, self.prompts, self.new_tokens, name)
            quality.agreement = agreement(self.reference_tokens, tokens)
        return quality
