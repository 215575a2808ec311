"""`bench --suite peers`: our engine, transformers and llama.cpp on the same SmolLM2 GGUF, side by side in one run.

Two workloads, the same prompt token ids for every peer, greedy, fixed lengths:

* batch-1 decode: one prompt, ``batch1_tokens`` new tokens; decode tokens/s (from the first token to the last, prefill
  excluded, the fastest of ``BATCH1_REPEATS`` runs for every peer), next to the bound this machine sets: bytes of
  weights a token reads / the best read bandwidth measured here (``bandwidth``, probed before and after each of our
  runs);
* N questions on one shared ~500-token observation, N in ``ns``, ``new_tokens`` each: tokens/s over the whole run
  (the observation's one prefill included) and the mean time to first token.  Ours submits all N at once (prefix
  computed once, decoding batched); llama.cpp answers one at a time with its prompt cache keeping the shared prefix,
  as a llama_ros node would, and also as N parallel sequences in one unified KV cache (the prefix decoded once and
  shared, one batch per step: its ``parallel`` example, its server's slots); ``ratio_vs_llamacpp_nN`` is against the
  faster of the two.  transformers answers one at a time, prefix recomputed (up to ``hf_max_n``: it is slow).
  Many sequences decoding together are bound by arithmetic, not by reads: ``nN_fraction_of_gemm_bound`` is our fp32
  tokens/s over the most the workload's least arithmetic allows at the best fp32 product rate measured here
  (``arithmetic``, probed before and after our fp32 runs), and ``gemm_bound_ratio_vs_llamacpp_nN`` that most over
  llama.cpp's: the highest ``ratio_vs_llamacpp_nN`` fp32 products could reach on this machine in this run.

With ``bf16_weights`` ours also runs with its projections stored as bf16 under fp32 compute (``weight_dtype:
bfloat16``: half the bytes a token reads, oneDNN's AVX512-BF16 products), and its quality is measured against our fp32
reference path: the share of each answer's greedy tokens before the first that differs (the fp32 path equals
transformers token for token); llama.cpp's Q4_1 answers get the same measure, the yardstick for a lossy format.
With ``int8_weights`` it also runs with int8 projections and LM head (``weight_dtype: int8``: one fp32 scale per 32
weights of a row, 0.28 of fp32's bytes for the one-to-eight-row C products), and with ``q4_1_weights`` with the
projections as the file's own Q4_1 blocks (``weight_dtype: q4_1``, the LM head int8: llama.cpp's bytes, fp32 products
over the very weights our fp32 path has), each measured the same way. Each format's quality is also scored
teacher-forced, which no early divergence can sway: over the first ``text_tokens`` tokens of the shipped text
(``quant_text``), eight at a time (the C products of up to eight rows, over the stored rows), the share of positions
whose most likely next token is the fp32 path's and the mean KL from its next-token distributions; llama.cpp's Q4_1
is scored on the same tokens (its logits over the text in one evaluation) against the same fp32 distributions.

llama.cpp runs in its own venv (``make peers``: llama-cpp-python, built from source) as a subprocess on the same
file, with the same thread count; without it the suite says so and reports ours and transformers only.  The PNG
(``plot``) shows both workloads.  Absolute numbers describe this machine only; the ratios are the point.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from oxygen_ros.bench.arithmetic import gemm_flops_per_s, generation_flops
from oxygen_ros.bench.bandwidth import read_bandwidth
from oxygen_ros.bench.engine_suite import QUESTIONS
from oxygen_ros.bench.quant_text import TextReference, TextScore, text_token_ids
from oxygen_ros.bench.report import result
from oxygen_ros.bench.scene_text import observation_text
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.kernels.cpu_matvec import matvec_kernel
from oxygen_ros.layers.packed_linear import PackedLinear, can_pack_bf16
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.gguf_loader import smollm2_gguf_path

BATCH1_PROMPT = "Tell me a story about a robot that learns to cook."
BATCH1_REPEATS = 3  # batch-1 decode is the fastest of this many runs for every peer: this VM's speed moves in minutes
TEXT_CHUNK = 8  # teacher-forced tokens per forward pass: the C products of up to eight rows, over the stored rows
PEERS_PYTHON_ENV = "OXYGEN_PEERS_PYTHON"  # else .peers-venv/bin/python of the checkout (``make peers``)
# our stored weight formats run beside fp32: the suite's name -> (weight_dtype, the plot's colour)
STORED_FORMATS = {"bf16": ("bfloat16", "tab:red"), "int8": ("int8", "tab:purple"), "q4_1": ("q4_1", "tab:brown")}


def run(
    ns: str = "1,4,8,16,32", new_tokens: int = 64, batch1_tokens: int = 128, prefix_tokens: int = 500,
    hf_max_n: int = 8, plot: str = "out/bench/peers.png", bf16_weights: int = 1, int8_weights: int = 1,
    q4_1_weights: int = 1, text_tokens: int = 256,
) -> dict[str, Any]:
    counts = [int(n) for n in str(ns).split(",")]
    threads = torch.get_num_threads()
    engine = Engine(EngineConfig(kv_cache_bytes=1 << 30, max_num_seqs=max(counts), max_model_len=2048))
    obs = Observation(text=observation_text(engine.tokenizer, prefix_tokens))
    batch1 = engine.encode(GenerateRequest(BATCH1_PROMPT))
    workloads = {n: [_question(engine, obs, i) for i in range(n)] for n in counts}
    prompts = {n: [engine.encode(r) for r in reqs] for n, reqs in workloads.items()}

    weight_bytes = _weight_bytes_per_token(engine)
    args: LlamaArgs = engine.bundle.model.args
    probes = [read_bandwidth()]  # before and after each of our runs: the VM's memory speed moves within minutes
    gemm_probes = [gemm_flops_per_s(args)]
    ours = _ours(engine, counts, workloads, batch1_tokens, new_tokens, "oxygen_ros")
    probes.append(read_bandwidth())
    gemm_probes.append(gemm_flops_per_s(args))
    text = TextReference.of(engine, text_token_ids(engine, text_tokens), TEXT_CHUNK)  # fp32's next-token distributions
    scores: dict[str, TextScore] = {}
    stored: dict[str, tuple[dict[str, Any], int]] = {}  # weight format -> (our runs, weight bytes a token reads)
    c_kernels = matvec_kernel() is not None
    runs_here = {"bf16": can_pack_bf16(torch.device("cpu")), "int8": c_kernels, "q4_1": c_kernels}
    asked = {"bf16": bf16_weights, "int8": int8_weights, "q4_1": q4_1_weights}
    skipped = [name for name, on in asked.items() if on and not runs_here[name]]
    for name, on in asked.items():
        if on and runs_here[name]:
            del engine
            engine = Engine(EngineConfig(kv_cache_bytes=1 << 30, max_num_seqs=max(counts), max_model_len=2048,
                                         weight_dtype=STORED_FORMATS[name][0]))  # fmt: skip
            runs = _ours(engine, counts, workloads, batch1_tokens, new_tokens, f"oxygen_ros {name} weights")
            stored[name] = (runs, _weight_bytes_per_token(engine))
            scores[name] = text.score(engine)
            probes.append(read_bandwidth())
    bandwidth = max(probes)
    bound = bandwidth / weight_bytes
    # the fp32 compute bound of each N-question workload: its least arithmetic at the best product rate measured
    gemm_bound = {n: n * new_tokens * max(gemm_probes) / generation_flops(args, prompts[n], new_tokens) for n in counts}
    llamacpp_bound = bandwidth / _gguf_weight_bytes()
    hf = _transformers(batch1, batch1_tokens, {n: p for n, p in prompts.items() if n <= hf_max_n}, new_tokens)
    llama = _llamacpp(batch1, batch1_tokens, prompts, new_tokens, threads, text)

    def tokens_per_s(side: dict[int, dict[str, Any]], n: int) -> float | None:
        return n * new_tokens / side[n]["seconds"] if n in side else None

    metrics: dict[str, Any] = {
        "batch1_tokens_per_s": ours["batch1"],
        "batch1_ratio_vs_hf": ours["batch1"] / hf["batch1"],
        "batch1_fraction_of_bound": ours["batch1"] / bound,
        "bound_tokens_per_s": bound,
    }
    for n in counts:
        metrics[f"tokens_per_s_n{n}"] = tokens_per_s(ours["shared"], n)
        metrics[f"n{n}_fraction_of_gemm_bound"] = tokens_per_s(ours["shared"], n) / gemm_bound[n]
    for name, (runs, stored_bytes) in stored.items():
        metrics[f"{name}_weights_batch1_tokens_per_s"] = runs["batch1"]
        metrics[f"{name}_weights_batch1_fraction_of_bound"] = runs["batch1"] * stored_bytes / bandwidth
        for n in counts:
            metrics[f"{name}_weights_tokens_per_s_n{n}"] = tokens_per_s(runs["shared"], n)
        metrics[f"{name}_weights_greedy_agreement"] = _agreement(ours, runs, counts)
        metrics[f"{name}_weights_teacher_forced_top1"] = scores[name].top1
        metrics[f"{name}_weights_kl"] = scores[name].kl
    if llama is not None:
        metrics["batch1_ratio_vs_llamacpp"] = ours["batch1"] / llama["batch1"]
        metrics["llamacpp_batch1_fraction_of_bound"] = llama["batch1"] / llamacpp_bound
        for name, (runs, _) in stored.items():
            metrics[f"{name}_weights_batch1_ratio_vs_llamacpp"] = runs["batch1"] / llama["batch1"]
        for n in counts:
            best = max(tokens_per_s(llama["shared"], n), tokens_per_s(llama["parallel"], n))
            metrics[f"ratio_vs_llamacpp_n{n}"] = tokens_per_s(ours["shared"], n) / best
            metrics[f"gemm_bound_ratio_vs_llamacpp_n{n}"] = gemm_bound[n] / best  # the most fp32 could reach here
            for name, (runs, _) in stored.items():
                metrics[f"{name}_weights_ratio_vs_llamacpp_n{n}"] = tokens_per_s(runs["shared"], n) / best
        # how far its Q4_1 answers follow the fp32 ones: the yardstick for a lossy weight format of ours
        metrics["llamacpp_greedy_agreement"] = _agreement(ours, llama, counts)
        metrics["llamacpp_teacher_forced_top1"] = llama["teacher_forced"]["top1"]
        metrics["llamacpp_kl"] = llama["teacher_forced"]["kl"]
    details = {
        "threads": threads,
        "read_bandwidth_gb_s": bandwidth / 1e9,
        "read_bandwidth_probes_gb_s": [b / 1e9 for b in probes],
        "gemm_gflop_per_s_probes": [f / 1e9 for f in gemm_probes],
        "gemm_bound_tokens_per_s": gemm_bound,
        "weight_bytes_per_token": weight_bytes,
        "prompt_tokens": {n: [len(p) for p in ps] for n, ps in prompts.items()},
        "ours": ours,
        **{f"ours_{name}_weights": runs for name, (runs, _) in stored.items()},
        "weight_bytes_per_token_stored": {name: stored_bytes for name, (_, stored_bytes) in stored.items()},
        "weight_formats_not_run": {name: "this CPU lacks its products" for name in skipped},
        "transformers": hf,
        "llamacpp": llama if llama is not None else "not run: no llama.cpp peer (make peers)",
    }
    if plot:
        bounds = {"fp32": bound, "llama.cpp": llamacpp_bound, **{name: bandwidth / b for name, (_, b) in stored.items()}}
        _plot(Path(plot), counts, new_tokens, ours, {name: runs for name, (runs, _) in stored.items()}, hf, llama,
              bounds)  # fmt: skip
        details["plot"] = plot
    params = {"ns": ns, "new_tokens": new_tokens, "batch1_tokens": batch1_tokens, "prefix_tokens": prefix_tokens,
              "hf_max_n": hf_max_n, "bf16_weights": bf16_weights, "int8_weights": int8_weights,
              "q4_1_weights": q4_1_weights, "text_tokens": text_tokens}  # fmt: skip
    return result("peers", metrics, details, params)


def _question(engine: Engine, obs: Observation, i: int) -> GenerateRequest:
    question = QUESTIONS[i % len(QUESTIONS)] + (f" (task {i})" if i >= len(QUESTIONS) else "")
    return GenerateRequest(question, task_id=f"task-{i}", observation=obs)


def _weight_bytes_per_token(engine: Engine) -> int:
    """Bytes one decode token reads: every projection of every layer and the LM head, as the one-row products stream
    them (int8 rows with their scales, Q4_1 blocks, bf16 or fp32 rows; the embedding lookup reads one row)."""
    model = engine.bundle.model
    packed = [m for m in model.layers.modules() if isinstance(m, PackedLinear)] + [model.packed_head]
    if any(m is None for m in packed) or len(packed) < 2:  # not packed (no oneDNN): stored as the compute dtype
        args: LlamaArgs = model.args
        return (args.num_layers * args.layer_weights() + args.vocab_size * args.hidden_size) * engine.dtype.itemsize
    return sum(m.streamed_bytes for m in packed)


def _gguf_weight_bytes() -> int:
    """Bytes a llama.cpp decode token reads: every tensor of the GGUF file in its stored format (its output head is
    the tied embedding table, read whole)."""
    from gguf import GGUFReader

    return sum(int(t.n_bytes) for t in GGUFReader(smollm2_gguf_path()).tensors)


def _ours(engine: Engine, counts: list[int], workloads: dict[int, list[GenerateRequest]], batch1_tokens: int,
          new_tokens: int, name: str) -> dict[str, Any]:  # fmt: skip
    out = {"batch1": _ours_batch1(engine, batch1_tokens), "shared": {}}
    for n in tqdm(counts, desc=f"{name}: N questions", unit="run"):
        out["shared"][n] = _ours_shared(engine, workloads[n], new_tokens)
    return out


def _agreement(reference: dict[str, Any], other: dict[str, Any], counts: list[int]) -> float:
    """Mean share of an answer's tokens before the first one that differs from the reference's answer."""
    shares = []
    for n in counts:
        for ref, got in zip(reference["shared"][n]["tokens"], other["shared"][n]["tokens"], strict=True):
            same = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), len(ref))
            shares.append(same / len(ref))
    return sum(shares) / len(shares)


def _ours_batch1(engine: Engine, new_tokens: int) -> float:
    """Decode tokens/s of one request alone (from its first token to its last), the fastest of BATCH1_REPEATS."""
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    engine.generate([GenerateRequest("warm up", sampling=SamplingParams(max_new_tokens=4))])
    best = 0.0
    for _ in range(BATCH1_REPEATS):
        rid = engine.submit(GenerateRequest(BATCH1_PROMPT, sampling=sampling))
        req = engine.requests[rid]
        while not req.output_token_ids:
            engine.step()
        start = time.perf_counter()
        while engine.has_unfinished:
            engine.step()
        best = max(best, (new_tokens - 1) / (time.perf_counter() - start))
    return best


def _ours_shared(engine: Engine, reqs: list[GenerateRequest], new_tokens: int) -> dict[str, Any]:
    """All N requests at once, from a pool that has forgotten every prefix."""
    engine.pool.reset_prefix_cache()
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    start = time.perf_counter()
    ids = [engine.submit(GenerateRequest(r.prompt, task_id=r.task_id, observation=r.observation, sampling=sampling))
           for r in reqs]  # fmt: skip
    pending, ttft, tokens = {i: engine.requests[i] for i in ids}, [], {}
    while engine.has_unfinished:
        tokens.update((out.request_id, out.token_ids) for out in engine.step())
        started = [i for i, r in pending.items() if r.output_token_ids]
        ttft += [time.perf_counter() - start] * len(started)
        for i in started:
            del pending[i]
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "ttft_s": ttft, "tokens": [tokens[i] for i in ids]}


@torch.inference_mode()
def _transformers(
    batch1: list[int], batch1_tokens: int, prompts: dict[int, list[list[int]]], new_tokens: int
) -> dict[str, Any]:
    try:
        from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList
    except ImportError as exc:
        raise SystemExit("the peers suite compares against transformers: pip install -r requirements/test.txt") from exc
    path = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()

    def generate(ids: list[int], n: int) -> float:
        input_ids = torch.tensor([ids])
        start = time.perf_counter()
        model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=n, min_new_tokens=n,
                       do_sample=False)  # fmt: skip
        return time.perf_counter() - start

    class StepClock(LogitsProcessor):
        """Stamps each generation step after its forward pass: decode is timed from the first token to the last,
        as ours is (the difference of a run of n tokens and one of 1 went negative when a load spike hit the
        shorter)."""

        def __init__(self) -> None:
            self.stamps: list[float] = []

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            self.stamps.append(time.perf_counter())
            return scores

    def decode_s(ids: list[int], n: int) -> float:
        clock, input_ids = StepClock(), torch.tensor([ids])
        model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=n, min_new_tokens=n,
                       do_sample=False, logits_processor=LogitsProcessorList([clock]))  # fmt: skip
        return clock.stamps[-1] - clock.stamps[0]

    generate(batch1[:8], 2)  # warm up
    decode = min(decode_s(batch1, batch1_tokens) for _ in range(BATCH1_REPEATS))
    out: dict[str, Any] = {"batch1": (batch1_tokens - 1) / decode, "shared": {}}
    for n, ps in tqdm(prompts.items(), desc="transformers: N questions, one at a time", unit="run"):
        ttft, seconds = [], 0.0
        for ids in ps:
            ttft.append(seconds + generate(ids, 1))
            seconds += generate(ids, new_tokens)
        out["shared"][n] = {"seconds": seconds, "ttft_s": ttft}
    return out


def _peers_python() -> Path | None:
    explicit = os.environ.get(PEERS_PYTHON_ENV)
    if explicit:
        return Path(explicit)
    for root in (Path.cwd(), *Path(__file__).resolve().parents):
        candidate = root / ".peers-venv" / "bin" / "python"
        if candidate.exists():
            return candidate
    return None


def _llamacpp(batch1: list[int], batch1_tokens: int, prompts: dict[int, list[list[int]]], new_tokens: int,
              threads: int, text: TextReference) -> dict[str, Any] | None:  # fmt: skip
    python = _peers_python()
    if python is None:
        print(f"llama.cpp peer skipped: no .peers-venv (run `make peers`) and no ${PEERS_PYTHON_ENV}", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory() as folder:
        reference = Path(folder) / "fp32_logprobs.npy"  # [tokens - 1, vocab]: ~50 MB for 256 tokens
        np.save(reference, text.logprobs.numpy())
        job = {
            "gguf": str(smollm2_gguf_path()),
            "threads": threads,
            "n_ctx": 2048,
            "batch1": {"prompt": batch1, "new_tokens": batch1_tokens, "repeats": BATCH1_REPEATS},
            "shared": [{"prompts": ps, "new_tokens": new_tokens} for ps in prompts.values()],
            "teacher_forced": {"ids": text.ids, "reference": str(reference)},
        }
        print(f"llama.cpp ({python}): batch 1, N questions, the text teacher-forced ...", file=sys.stderr)
        done = subprocess.run([str(python), str(Path(__file__).with_name("llamacpp_peer.py"))], input=json.dumps(job),
                              capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"the llama.cpp peer failed ({done.returncode}):\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout)
    return {"batch1": out["batch1_decode_tokens_per_s"], "teacher_forced": out["teacher_forced"],
            **{way: {run["n"]: run for run in out[way]} for way in ("shared", "parallel")}}


def _plot(path: Path, counts: list[int], new_tokens: int, ours: dict, stored: dict[str, dict], hf: dict,
          llama: dict | None, bounds: dict[str, float]) -> None:  # fmt: skip
    """Left: batch-1 tokens/s, each bar with its own bound (its weights' bytes a token / the read bandwidth) and the
    share of it reached; right: tokens/s over N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sides = [("oxygen_ros fp32", ours, "tab:orange", bounds["fp32"])]
    for name, runs in stored.items():
        sides.append((f"oxygen_ros {name} weights", runs, STORED_FORMATS[name][1], bounds[name]))
    sides.append(("transformers", hf, "tab:blue", bounds["fp32"]))
    if llama is not None:
        sides.append(("llama.cpp (Q4_1)", llama, "tab:green", bounds["llama.cpp"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    left.bar([name for name, *_ in sides], [side["batch1"] for _, side, *_ in sides], color=[c for *_, c, _ in sides])
    top = 1.6 * max(side["batch1"] for _, side, *_ in sides)
    for i, (_, side, _, bound) in enumerate(sides):  # a bound above the axis is written at its top
        left.hlines(min(bound, top), i - 0.4, i + 0.4, colors="black", linestyles="--" if bound <= top else ":")
        left.text(i, min(bound, top), f"{bound:.0f}" + ("" if bound <= top else " (off the axis)"), ha="center",
                  va="bottom", fontsize=7)  # fmt: skip
        left.text(i, side["batch1"], f"{side['batch1'] / bound:.0%}", ha="center", va="bottom", fontsize=8)
    left.set_ylim(0, top * 1.08)
    left.set_ylabel("decode tokens/s (% of its bound)")
    left.set_title("batch 1; dashes: bytes of weights a token reads / read bandwidth", fontsize=10)
    left.tick_params(axis="x", labelsize=8)
    sides = [(name, side, color) for name, side, color, _ in sides]
    if llama is not None:
        sides[-1] = ("llama.cpp (Q4_1), one at a time", llama, "tab:green")
        sides.append(("llama.cpp (Q4_1), parallel sequences", {"shared": llama["parallel"]}, "tab:olive"))
    for name, side, color in sides:
        ns = [n for n in counts if n in side["shared"]]
        right.plot(ns, [n * new_tokens / side["shared"][n]["seconds"] for n in ns], marker="o", color=color,
                   label=name)  # fmt: skip
    right.set_xscale("log", base=2)
    right.set_xticks(counts, [str(n) for n in counts])
    right.set_xlabel("questions on one observation (N)")
    right.set_ylabel("tokens/s, whole run")
    right.set_title(f"N questions x {new_tokens} tokens, shared ~500-token prefix")
    right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
