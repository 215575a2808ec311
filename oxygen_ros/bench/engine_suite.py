"""`bench --suite engine`: 8 requests on one shared observation, our engine vs transformers' generate one at a time.

The peer is what a user would reach for: Hugging Face transformers on the same GGUF weights, each request generated
on its own (its own prefill of the whole prompt, its own contiguous KV cache).  Ours runs them together through the
unified pool: the observation is prefilled once, decoding is batched.  Memory is compared with the OxyGen reference
layout (one static contiguous buffer of prompt + max_new_tokens per request).
"""

import time
from typing import Any

import torch
from tqdm import tqdm

from oxygen_ros.bench.report import result
from oxygen_ros.bench.scene_text import observation_text
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams

QUESTIONS = [
    "What is on the table?",
    "Where is the red cup?",
    "Pick up the blue box and put it on the shelf.",
    "Is the path to the door clear?",
    "How many objects are there?",
    "Which object is closest to the robot?",
    "Move to the kitchen door.",
    "What color is the plate?",
]


def run(num_requests: int = 8, prefix_tokens: int = 500, new_tokens: int = 64, block_size: int = 16,
        kv_dtype: str = "auto") -> dict[str, Any]:
    """``kv_dtype``: the pool's format (config ``kv_dtype``; ``auto`` = the compute dtype)."""
    engine = Engine(EngineConfig(block_size=block_size, kv_cache_bytes=512 << 20, max_num_seqs=num_requests,
                                 kv_dtype=kv_dtype))  # fmt: skip
    obs = Observation(text=observation_text(engine.tokenizer, prefix_tokens))
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    reqs = [
        GenerateRequest(QUESTIONS[i % len(QUESTIONS)], task_id=f"task-{i}", observation=obs, sampling=sampling)
        for i in range(num_requests)
    ]
    prompts = [engine.encode(r) for r in reqs]
    engine.generate([GenerateRequest("warm up", sampling=SamplingParams(max_new_tokens=2))])
    engine.pool.reset_prefix_cache()

    ours = _run_ours(engine, reqs)
    hf_seconds = _run_transformers(prompts, new_tokens)

    generated = num_requests * new_tokens
    static_bytes = sum(len(p) + new_tokens for p in prompts) * engine.layout.bytes_per_token
    metrics = {
        "tokens_per_s_ratio_vs_hf": hf_seconds / ours["seconds"],
        "kv_bytes_ratio_vs_static": ours["peak_kv_bytes"] / static_bytes,
        "kv_waste_fraction": ours["waste_fraction"],
        "block_size": block_size,
        "ours_tokens_per_s": generated / ours["seconds"],
        "hf_tokens_per_s": generated / hf_seconds,
    }
    details = {
        "prompt_tokens": [len(p) for p in prompts],
        "ours_seconds": ours["seconds"],
        "ours_prefill_seconds": ours["prefill_seconds"],
        "ours_decode_seconds": ours["decode_seconds"],
        "ours_decode_steps": ours["decode_steps"],
        "ours_tokens_computed": ours["tokens_computed"],
        "hf_seconds": hf_seconds,
        "hf_tokens_computed": sum(len(p) + new_tokens - 1 for p in prompts),
        "peak_kv_bytes": ours["peak_kv_bytes"],
        "static_kv_bytes": static_bytes,
        "reused_prefix_tokens": ours["reused_prefix_tokens"],
    }
    params = {"num_requests": num_requests, "prefix_tokens": prefix_tokens, "new_tokens": new_tokens,
              "kv_dtype": engine.kv_dtype_name}  # fmt: skip
    return result("engine", metrics, details, params)


def _run_ours(engine: Engine, reqs: list[GenerateRequest]) -> dict[str, Any]:
    computed_before = engine.runner.tokens_computed
    start = time.perf_counter()
    for r in reqs:
        engine.submit(r)
    prefill_s = decode_s = 0.0
    decode_steps = 0
    peak_blocks, waste, outs = 0, 0.0, []
    with tqdm(total=len(reqs), desc="oxygen_ros engine", unit="req") as bar:
        while engine.has_unfinished:
            t0 = time.perf_counter()
            stats = engine.stats()
            if stats.used_blocks >= peak_blocks:
                peak_blocks, waste = stats.used_blocks, stats.fragmentation
            done = engine.step()
            dt = time.perf_counter() - t0
            if engine.last_batch.is_decode:
                decode_s, decode_steps = decode_s + dt, decode_steps + 1
            else:
                prefill_s += dt
            outs += done
            bar.update(len(done))
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "prefill_seconds": prefill_s,
        "decode_seconds": decode_s,
        "decode_steps": decode_steps,
        "tokens_computed": engine.runner.tokens_computed - computed_before,
        "peak_kv_bytes": peak_blocks * engine.layout.bytes_per_block,
        "waste_fraction": waste,
        "reused_prefix_tokens": [o.reused_prefix_tokens for o in outs],
    }


@torch.inference_mode()
def _run_transformers(prompts: list[list[int]], new_tokens: int) -> float:
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        raise SystemExit("the engine suite compares against transformers: pip install -r requirements/test.txt") from exc
    from oxygen_ros.models.gguf_loader import smollm2_gguf_path

    path = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    model.generate(torch.tensor([prompts[0][:8]]), max_new_tokens=2, do_sample=False)  # warm up
    seconds = 0.0
    for ids in tqdm(prompts, desc="transformers, one at a time", unit="req"):
        input_ids = torch.tensor([ids])
        start = time.perf_counter()
        model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
        )
        seconds += time.perf_counter() - start
    return seconds
