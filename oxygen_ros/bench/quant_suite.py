"""`bench --suite quant`: what each KV storage format costs in quality and saves in bytes, against full precision.

The baseline is the same engine with full-precision KV (``kv_dtype=auto``: fp32 on CPU, bf16 on CUDA); every other
run changes only ``kv_dtype``.  Language (SmolLM2): greedy agreement over 50 fixed prompts, and teacher-forced top-1
agreement, KL and perplexity on a public-domain text shipped in the package (``quant_language``).  Actions (pi05-causal-tiny): action chunks with the same
noise (``quant_actions``).  The per-content policy (``quant_policy``): questions about an observation with every
block quantized vs with the observation prefix kept at fp16.  Distortion (``quant_distortion``): each K/V plane's
relative error per format on the text's real K/V, and the bits a uniform code needs to be within bf16's.  Bytes:
``KVLayout.bytes_per_token``, scales included.
bf16 KV is measured by default too: its rounding (2^-9 relative) is the noise floor a quantized format is judged
against (``--param dtypes=fp16,bf16,int8,fp8`` adds fp16).  The gates (``gates``): int8 agrees at least as well as
bf16 KV, greedy and teacher-forced, with at most its KL; fp8's teacher-forced top-1 is at least 0.8; both store at
most 0.57x fp16's bytes per token, scales included.  A format that misses its gates gets a per-layer sensitivity
sweep and the cost of keeping its worst layers at full precision (``quant_fallback``).  The default run takes
10-20 minutes on 2 CPU cores.
"""

import time
from typing import Any

import numpy as np
import torch

from oxygen_ros.bench.quant_actions import action_chunks, observation_change_mse, observations
from oxygen_ros.bench.quant_distortion import distortion, text_kv
from oxygen_ros.bench.quant_fallback import Gates, fallback, layer_sensitivity
from oxygen_ros.bench.quant_language import PROMPTS, LanguageBench, LanguageQuality
from oxygen_ros.bench.quant_policy import PolicyBench
from oxygen_ros.bench.report import result
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.device import resolve_dtype, torch_device
from oxygen_ros.engine.engine import Engine
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.kernels import KVQuantSpec
from oxygen_ros.models.registry import ModelBundle, load_model

GATED = ("int8", "fp8")
BYTES_CEILING = 0.57  # of fp16's bytes per token, scales included
FP8_TOP1 = 0.8


def gates(name: str, measured: dict[str, LanguageQuality]) -> Gates | None:
    """int8 against bf16 KV measured in the same run (None without it); fp8 against a fixed teacher-forced top-1."""
    if name == "fp8":
        return Gates(teacher_forced_top1=FP8_TOP1)
    bf16 = measured.get("bf16")
    if bf16 is None or bf16.agreement is None:
        return None
    return Gates(bf16.agreement.token_agreement, bf16.teacher_forced_top1, bf16.kl)


def run(
    prompts: int = 50, new_tokens: int = 64, text_tokens: int = 1024, chunk: int = 32, action_observations: int = 4,
    sweep_tokens: int = 128, max_fallback_layers: int = 8, dtypes: str = "bf16,int8,fp8", block_size: int = 16,
) -> dict[str, Any]:
    params: dict[str, Any] = dict(locals())  # the arguments, as run
    names = dtypes.split(",")
    device = torch_device(EngineConfig().device)
    compute_dtype = resolve_dtype("auto", device)
    seconds: dict[str, float] = {}
    metrics: dict[str, Any] = {}
    details: dict[str, Any] = {"fallback": {}}

    start = time.perf_counter()
    smollm2 = load_model("smollm2-135m", device, compute_dtype)
    bench = LanguageBench(smollm2, PROMPTS[:prompts], new_tokens, text_tokens, chunk, block_size)
    metrics["reference_ppl"] = bench.text.perplexity
    if compute_dtype == torch.float32:  # K/V computed in bf16 (CUDA) would be their own bf16 rounding already
        metrics |= distortion(*text_kv(bench.engine("fp32"), bench.text.ids, chunk))  # what each plane's storage loses
    measured: dict[str, LanguageQuality] = {}
    for name in sorted(names, key=lambda n: n in GATED):  # bf16 first: int8's gates are its numbers
        measured[name] = quality = bench.measure(name)
        metrics |= _language_metrics(name, quality, smollm2, block_size)
        details[f"{name}_first_divergence"] = quality.agreement.first_divergence  # measure() always runs greedy
    missed = []
    for name in (n for n in names if n in GATED):
        gate = gates(name, measured)
        met = None if gate is None else gate.met(measured[name]) and metrics[f"{name}_bytes_ratio_vs_fp16"] <= BYTES_CEILING
        metrics[f"{name}_gates_met"] = met
        if gate is not None and not met:
            missed.append((name, gate))
    seconds["language"] = time.perf_counter() - start

    start = time.perf_counter()
    for name, gate in missed:
        sensitivity = layer_sensitivity(bench, name, sweep_tokens)
        best, tried = fallback(bench, name, gate, sensitivity, max_fallback_layers)
        metrics |= _language_metrics(f"{name}_fallback", best, smollm2, block_size)
        metrics[f"{name}_fallback_layout"] = best.layout
        metrics[f"{name}_fallback_gates_met"] = gate.met(best)  # bytes: see its bytes_ratio_vs_fp16
        details["fallback"][name] = {
            "sweep_tokens": sweep_tokens,
            "layer_kl_divergence": sensitivity,
            "tried": [_language_metrics("", q, smollm2, block_size) | {"layout": q.layout} for q in tried],
        }
    seconds["fallback"] = time.perf_counter() - start

    start = time.perf_counter()
    metrics |= _policy_metrics(smollm2, [n for n in names if n in GATED], prompts, new_tokens, block_size)
    seconds["policy"] = time.perf_counter() - start

    start = time.perf_counter()
    pi05 = load_model("pi05-causal-tiny", device, compute_dtype)
    metrics |= _action_metrics(pi05, names, action_observations, block_size)
    seconds["actions"] = time.perf_counter() - start

    details["bytes_per_token"] = {
        bundle.model_id: {n: _layout(bundle, n, (), block_size).bytes_per_token for n in ("fp32", *names)}
        for bundle in (smollm2, pi05)
    }
    details["seconds"] = seconds
    params["reference_kv_dtype"] = KVQuantSpec(compute_dtype).name
    params["gates"] = {"int8": "token_agreement and teacher_forced_top1 >= bf16's, kl <= bf16's",
                       "fp8": f"teacher_forced_top1 >= {FP8_TOP1}", "bytes_ratio_vs_fp16": f"<= {BYTES_CEILING}"}
    return result("quant", metrics, details, params)


def _layout(bundle: ModelBundle, kv_dtype: str, full_precision_layers: tuple[int, ...], block_size: int) -> KVLayout:
    """The layout an engine would build, with full-precision layers at 16 bits (fp16/bf16 compute, as on CUDA)."""
    return KVLayout(
        bundle.num_layers, bundle.num_kv_heads, bundle.head_dim, block_size, KVQuantSpec.parse(kv_dtype).storage_dtype,
        full_precision_layers, torch.float16,
    )


def _language_metrics(prefix: str, q: LanguageQuality, bundle: ModelBundle, block_size: int) -> dict[str, Any]:
    """Agreement, text scores and bytes of one measured layout; bytes as deployed (16-bit full-precision layers)."""
    fp16 = _layout(bundle, "fp16", (), block_size).bytes_per_token
    deployed = _layout(bundle, q.kv_dtype, q.full_precision_layers, block_size).bytes_per_token
    p = f"{prefix}_" if prefix else ""
    return {
        f"{p}token_agreement": q.agreement.token_agreement if q.agreement else None,
        f"{p}prompts_identical": q.agreement.prompts_identical if q.agreement else None,
        f"{p}ppl_increase": q.ppl_increase,
        f"{p}kl": q.kl,
        f"{p}teacher_forced_top1": q.teacher_forced_top1,
        f"{p}bytes_per_token": deployed,
        f"{p}bytes_ratio_vs_fp16": deployed / fp16,
    }


def _policy_metrics(
    bundle: ModelBundle, names: list[str], prompts: int, new_tokens: int, block_size: int
) -> dict[str, Any]:
    """Observation questions: each format everywhere vs the observation prefix at fp16 and the rest in the format;
    agreement with full precision, bytes per stored token relative to fp16 everywhere, and batch time relative to
    the full-precision batch."""
    bench = PolicyBench(bundle, prompts, new_tokens, block_size)
    fp16 = _layout(bundle, "fp16", (), block_size).bytes_per_token
    metrics: dict[str, Any] = {}
    for name in names:
        for label, observation in ((name, ""), (f"fp16_prefix_{name}", "fp16")):
            q = bench.measure(name, observation)
            metrics |= {
                f"observation_{label}_token_agreement": q.token_agreement,
                f"observation_{label}_prompts_identical": q.prompts_identical,
                f"observation_{label}_bytes_ratio_vs_fp16": q.bytes_per_token / fp16,
                f"observation_{label}_time_ratio_vs_reference": q.time_ratio,
            }
    return metrics


def _action_metrics(bundle: ModelBundle, names: list[str], count: int, block_size: int) -> dict[str, float]:
    """Action-chunk MSE per format vs full-precision KV, absolute and relative to the chunks' variance and to the
    change another observation causes."""
    obs = observations(count)

    def chunks(kv_dtype: str) -> np.ndarray:
        config = EngineConfig(model="pi05-causal-tiny", kv_dtype=kv_dtype, block_size=block_size, kv_cache_bytes=64 << 20)
        return action_chunks(Engine(config, bundle=bundle), obs, kv_dtype)

    reference = chunks("auto")
    variance, moved = float(reference.var()), observation_change_mse(reference)
    metrics = {"pi05_action_variance": variance, "pi05_action_mse_observation_change": moved}
    for name in names:
        mse = float(np.mean((chunks(name) - reference) ** 2))
        metrics |= {
            f"pi05_action_mse_{name}": mse,
            f"pi05_action_mse_{name}_vs_variance": mse / variance,
            f"pi05_action_mse_{name}_vs_observation_change": mse / moved,
        }
    return metrics
