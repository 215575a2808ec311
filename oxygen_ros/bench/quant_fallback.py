"""When a format misses its gates: which layers to keep at full precision, and what that costs in bytes.

The sweep is the cheap kind: quantize ONE layer at a time (every other layer full precision) and take the mean KL
divergence of the teacher-forced next-token distributions on a short slice of the text as that layer's sensitivity;
one forward pass per chunk and layer, no greedy runs.  (KL rather than perplexity: a single layer moves perplexity by
less than its noise, in either direction, and would rank layers at random.)  The fallback then keeps the k most
sensitive layers at full precision and looks for the smallest k (of 1, 2, 4, ... up to a maximum) that meets the
gates.
"""

import math
from dataclasses import dataclass

from tqdm import tqdm

from oxygen_ros.bench.quant_language import LanguageBench, LanguageQuality
from oxygen_ros.bench.quant_text import TextReference


@dataclass(frozen=True)
class Gates:
    """What a layout must do against full precision: at least this greedy agreement and teacher-forced top-1
    agreement, at most this KL. (Bytes are the suite's to check: keeping layers at full precision raises them.)"""

    token_agreement: float = 0.0
    teacher_forced_top1: float = 0.0
    kl: float = math.inf

    def text_met(self, quality: LanguageQuality) -> bool:
        """The teacher-forced gates, known before any greedy run."""
        return quality.teacher_forced_top1 >= self.teacher_forced_top1 and quality.kl <= self.kl

    def met(self, quality: LanguageQuality) -> bool:
        agreed = quality.agreement is not None and quality.agreement.token_agreement >= self.token_agreement
        return agreed and self.text_met(quality)


def layer_sensitivity(bench: LanguageBench, kv_dtype: str, sweep_tokens: int) -> list[float]:
    """Per layer: mean KL divergence from full precision on the first ``sweep_tokens`` text tokens with only that
    layer in ``kv_dtype``."""
    num_layers = bench.bundle.num_layers
    reference = TextReference.of(bench.engine("auto"), bench.text.ids[:sweep_tokens], bench.chunk)
    sensitivity = []
    for layer in tqdm(range(num_layers), desc=f"{kv_dtype} layer sweep", unit="layer", leave=False):
        others = tuple(i for i in range(num_layers) if i != layer)
        sensitivity.append(reference.score(bench.engine(kv_dtype, others)).kl)
    return sensitivity


def fallback(
    bench: LanguageBench, kv_dtype: str, gates: Gates, sensitivity: list[float], max_layers: int
) -> tuple[LanguageQuality, list[LanguageQuality]]:
    """(the cheapest layout that meets ``gates``, or the widest tried if none does; every measurement).

    The widest fallback (``max_layers`` most sensitive layers at full precision) goes first: if even it misses, no
    narrower one is worth a greedy run.  Otherwise 1, 2, 4, ... layers follow until one meets the gates.  Greedy
    agreement is measured only where the teacher-forced gates are met.
    """
    ranked = sorted(range(len(sensitivity)), key=lambda i: sensitivity[i], reverse=True)

    def measure(k: int) -> LanguageQuality:
        return bench.measure(kv_dtype, tuple(sorted(ranked[:k])), greedy_if=gates.text_met)

    widest = measure(max_layers)
    tried = [widest]
    if not gates.met(widest):
        return widest, tried
    k = 1
    while k < max_layers:
        tried.append(measure(k))
        if gates.met(tried[-1]):
            return tried[-1], tried
        k *= 2
    return widest, tried
