"""`bench --suite device`: the engine end to end on this machine's accelerator, from the repository alone.

What ``scripts/gpu_check.sh`` times on a GPU after the kernel tests: the latency of one ``pi05-random-full`` action
chunk (pi0.5's shapes: SigLIP over ``images`` camera images, the Gemma prefix with the state as text, the action
expert's ``denoise`` steps; a new observation every chunk, so nothing is reused) and a batched decode at SmolLM2-135M's
shape (30 layers, 9 / 3 heads of 64, vocabulary 49152; random weights) at each batch size of ``batches``, the
decode steps' tokens/s. Both use random weights and a byte-level tokenizer built here, so the check needs no model
file (a GPU machine may have only the repository); the text they produce is noise, the time is the model's.
"""

import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers
from tqdm import tqdm

from oxygen_ros.bench.report import result
from oxygen_ros.bench.robot_frames import robot_frames
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.device import resolve_dtype, torch_device
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.common.seeded import seeded_init
from oxygen_ros.models.llama import LlamaModel
from oxygen_ros.models.pi05 import build_random_pi05
from oxygen_ros.models.registry import ModelBundle, vla_bundle
from oxygen_ros.models.tokenizer import Tokenizer

SMOLLM2_135M = LlamaArgs(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
                         num_kv_heads=3, head_dim=64, rope_theta=100000.0, max_position_embeddings=8192)  # fmt: skip
EOS = "<|endoftext|>"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")  # SmolLM2's turns, spelled in bytes


def byte_tokenizer() -> Tokenizer:
    """Byte-level BPE without merges (one token per byte, GPT-2's byte alphabet), an end-of-text token (BOS and EOS)
    and SmolLM2's ChatML turns: the smallest real tokenizer the engine runs with. Ids above its vocabulary (a random
    model samples any of 49152) decode to nothing."""
    vocab = {symbol: i for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab[EOS] = len(vocab)
    backend = Backend(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return Tokenizer(backend, chat_template=CHATML, bos_token=EOS, eos_token=EOS)  # pi0.5 prompts start with a BOS


def run(
    model: str = "pi05-random-full", chunks: int = 10, images: int = 3, layers: int = 0, batches: str = "1,8,32",
    prompt_tokens: int = 128, new_tokens: int = 64, kv_mib: int = 2048, seed: int = 0, dtype: str = "auto",
    kernel_backend: str = "auto",
) -> dict[str, Any]:
    """``chunks`` timed action chunks of ``model`` (after one warm-up chunk); a decode of ``new_tokens`` after a
    ``prompt_tokens`` prompt per request at each batch size of ``batches``, ``layers`` of SmolLM2's 30 (0: all).
    ``dtype`` and ``kernel_backend`` as EngineConfig's (auto: a GPU's bf16 through Triton; a CPU can run that path
    too, interpreted, before a GPU ever does)."""
    settings = {"kv_cache_bytes": kv_mib << 20, "max_model_len": 2048, "seed": seed, "dtype": dtype,
                "kernel_backend": kernel_backend}  # fmt: skip
    config = EngineConfig(model=model, **settings)
    device = torch_device(config.device)
    compute = resolve_dtype(config.dtype, device)
    tokenizer = byte_tokenizer()
    metrics: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                               "dtype": str(compute).removeprefix("torch.")}  # fmt: skip
    vla = vla_bundle(build_random_pi05(model, device, compute, seed), tokenizer, f"{model}@seed{seed}", device,
                     compute)  # fmt: skip
    latencies = chunk_latencies_ms(Engine(config, bundle=vla), chunks, images, seed)
    del vla
    metrics |= {"chunk_latency_ms_median": statistics.median(latencies), "chunk_latency_ms_max": max(latencies),
                "chunk_hz": 1e3 / statistics.median(latencies)}  # fmt: skip
    _said(metrics, "chunk_latency_ms_median", "chunk_latency_ms_max")
    args = replace(SMOLLM2_135M, num_layers=layers or SMOLLM2_135M.num_layers)
    lm = seeded_init(lambda: LlamaModel(args), device, compute, seed)
    bundle = ModelBundle(lm, tokenizer, f"smollm2-shape-random@seed{seed}", args.num_layers, args.num_kv_heads,
                         args.head_dim, args.max_position_embeddings, num_heads=args.num_heads)  # fmt: skip
    sizes = [int(b) for b in batches.split(",")]
    engine = Engine(EngineConfig(max_num_seqs=max(sizes), **settings), bundle=bundle)
    for size in sizes:
        metrics[f"decode_tokens_per_s_b{size}"] = decode_tokens_per_s(engine, size, prompt_tokens, new_tokens)
        _said(metrics, f"decode_tokens_per_s_b{size}")
    params = {"model": model, "chunks": chunks, "images": images, "layers": args.num_layers, "batches": batches,
              "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "kv_mib": kv_mib, "seed": seed,
              "dtype": dtype, "kernel_backend": kernel_backend}  # fmt: skip
    return result("device", metrics, {}, params)


def _said(metrics: dict[str, Any], *names: str) -> None:
    """Print measured metrics at once: a later phase that fails or runs out of time keeps them in the output."""
    print("device: " + ", ".join(f"{name} {metrics[name]:.4g}" for name in names), flush=True)


def chunk_latencies_ms(engine: Engine, chunks: int, images: int, seed: int) -> list[float]:
    """Milliseconds from submitting each chunk's request to its actions, a new observation each time."""
    frames = robot_frames([0] * (chunks + 1), max_new_tokens=1, images=images, seed=seed)
    latencies = []
    for i, frame in enumerate(tqdm(frames, desc="action chunks", unit="chunk")):
        start = time.perf_counter()
        (out,) = engine.generate(frame.actions)
        if out.actions is None or not np.isfinite(out.actions).all():  # (bf16 on a GPU: NaN would be a kernel bug)
            raise RuntimeError(f"chunk {i} returned no finite actions: {out.error_code} {out.message}")
        if i:  # the first one warms up (allocations, kernel compiles)
            latencies.append((time.perf_counter() - start) * 1e3)
    return latencies


def decode_tokens_per_s(engine: Engine, size: int, prompt_tokens: int, new_tokens: int) -> float:
    """Tokens/s of the decode steps while ``size`` requests decode ``new_tokens`` each (no early stop)."""
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    text = "the robot sees a red cup on the table. " * (prompt_tokens // 40 + 1)
    engine.generate([GenerateRequest(text[:32], sampling=SamplingParams(max_new_tokens=2))])  # warm up
    engine.pool.reset_prefix_cache()
    for i in range(size):  # distinct prompts: nothing is shared, every request prefills its own
        engine.submit(GenerateRequest(f"{i:04d} {text}"[:prompt_tokens], observation=Observation(), sampling=sampling))
    seconds, tokens, outs = 0.0, 0, []
    with tqdm(total=size, desc=f"decode, batch {size}", unit="req") as bar:
        while engine.has_unfinished:
            start = time.perf_counter()
            done = engine.step()
            if engine.last_batch.is_decode:
                seconds += time.perf_counter() - start
                tokens += len(engine.last_batch.requests)
            outs += done
            bar.update(len(done))
    short = [o for o in outs if o.generated_tokens != new_tokens]
    if short:
        raise RuntimeError(f"{len(short)} of {size} requests decoded other than {new_tokens} tokens: "
                           f"{short[0].message}")  # fmt: skip
    return tokens / seconds
