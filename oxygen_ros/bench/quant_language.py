"""Language-side measurements of a quantized KV pool (SmolLM2): greedy agreement with full precision, and the
teacher-forced text scores of ``quant_text``.

Greedy decoding reads every context token back from the pool at every step, so it sees the format throughout.
Agreement is counted per prompt up to the first divergence: after it the two runs continue different texts and
their later tokens are not comparable.
"""

from collections.abc import Callable
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
    "Explain how a dishwasher cleans plates without scrubbing them.",
    "Describe a day in the life of a delivery robot in a hospital.",
    "What should a family pack for a week of camping by a lake?",
    "Explain how solar panels turn sunlight into electricity.",
    "Write a short story about a lost umbrella that travels the city.",
    "Describe how to fold a shirt neatly, step by step.",
    "Why do we have seasons? Explain it to a curious child.",
    "Give advice to someone starting to learn the piano.",
    "Explain how a robot arm knows where its hand is.",
    "Describe the sounds and smells of a bakery early in the morning.",
    "What makes a good team? Explain with examples.",
    "Explain how bees make honey and why they matter to farms.",
    "Write a diary entry of a robot on its first day at a new home.",
    "Describe how to set a table for a dinner with six guests.",
    "Explain the difference between weather and climate.",
    "Give step by step directions for making a cup of tea.",
    "Describe the life cycle of a butterfly in detail.",
    "Explain how a camera lens focuses light onto a sensor.",
    "Write a short speech for the opening of a new library.",
    "What should a robot do when it finds a toy on the stairs?",
    "Explain how airplanes stay in the air.",
    "Describe a rainy afternoon in a small seaside town.",
    "Give five ideas for a birthday party for an eight year old.",
    "Explain how recycling plastic bottles works from bin to factory.",
    "Describe how a robot could help an elderly person at home.",
    "Write a fable about a fox, a crow and a clever robot.",
]  # 50, fixed before the KV formats were tuned against them


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
    kl: float  # mean KL(full precision || this) of the teacher-forced next-token distributions, nats per token
    teacher_forced_top1: float  # share of the text's positions whose argmax next token is full precision's
    agreement: Agreement | None  # None: not run, the teacher-forced scores alone already missed the gates


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
        self, kv_dtype: str, full_precision_layers: tuple[int, ...] = (),
        greedy_if: Callable[[LanguageQuality], bool] | None = None,
    ) -> LanguageQuality:  # fmt: skip
        """Text scores, then greedy agreement unless ``greedy_if`` says the text scores already decide."""
        engine = self.engine(kv_dtype, full_precision_layers)
        name = engine.layout.name
        text = self.text.score(engine)
        quality = LanguageQuality(kv_dtype, full_precision_layers, name, text.ppl_increase, text.kl, text.top1, None)
        if greedy_if is None or greedy_if(quality):
            tokens = greedy_tokens(engine, self.prompts, self.new_tokens, name)
            quality.agreement = agreement(self.reference_tokens, tokens)
        return quality
