"""`bench --suite tiers`: restoring a prefix from the host / disk tier vs recomputing it, and eviction hit rates.

Restore: one pi05-causal-tiny observation (3 camera images + a 100-token prompt = an 868-token prefix) is asked about
(one text token) by three engines on the same weights: without tiers (the prefix is recomputed: SigLIP and the
backbone prefill), with an L1 host tier only, with an L2 disk tier only.  Before each timed request of the tiered
engines the prefix is pushed out of the device pool (every pool block allocated and released: eviction demotes it),
so the request finds it only in that tier and promotes it.  Disk reads come from the OS page cache (the files were
just written), as they would on a robot revisiting a recent scene.  Medians over ``repeats``.

Hit rates: the replayed 12-task robot workload (``tiers_workload``) on SmolLM2 with the device pool at a quarter of
the workload's working set, evicting with each policy; the device pool's prefix hit rate is reported.

Preemption (``preemption_workload``): four SmolLM2 requests in a pool that holds half of what they grow to, with
``preemption_mode`` swap, recompute and auto (L1 in the pool's format): time, tokens computed, the rates auto measured
and what it chose; each must answer what a roomy pool answers.

Task switching (``task_switch``): handing the running request that holds the 868-token prefix to another task by
``Engine.transfer`` (block tables only) vs by copying its KV.  Approximate observation reuse (``reuse_quality``):
its action error on pi05-causal-tiny and answer changes on SmolLM2 at ``reuse_threshold``, against exact serving.
"""

import statistics
import tempfile
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from oxygen_ros.bench import reuse_quality, task_switch
from oxygen_ros.bench.preemption_workload import POOL_BLOCKS, run_preemption
from oxygen_ros.bench.report import result
from oxygen_ros.bench.robot_frames import camera_image
from oxygen_ros.bench.tiers_workload import pressure_pool_blocks, replay, robot_workload, working_set_blocks
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.models.registry import ModelBundle, load_model

RESTORE_POOL = {"kv_cache_bytes": 256 << 20, "max_model_len": 1024}


def run(
    images: int = 3, prompt_tokens: int = 100, repeats: int = 5, rounds: int = 12, scene_tokens: int = 96,
    answer_tokens: int = 6, reuse_threshold: float = 0.006, reuse_frames: int = 8,
) -> dict[str, Any]:  # fmt: skip
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    pi05, smollm2 = load_model("pi05-causal-tiny", device, torch.float32), load_model("smollm2-135m", device, torch.float32)
    restore = _restore(pi05, images, prompt_tokens, repeats)
    hit_rates = _hit_rates(smollm2, rounds, scene_tokens, answer_tokens)
    switch = task_switch.measure(Engine(EngineConfig(**RESTORE_POOL), bundle=pi05), _observation_request(
        pi05, images, prompt_tokens), repeats=10 * repeats)  # fmt: skip
    reuse = reuse_quality.measure(pi05, smollm2, reuse_threshold, reuse_frames)
    preemption = _preemption(smollm2)
    metrics = {
        "l1_restore_speedup": restore["recompute_ms"] / restore["l1_ms"],
        "l2_restore_speedup": restore["recompute_ms"] / restore["l2_ms"],
        "hit_rate_attention": hit_rates["attention"]["hit_rate"],
        "hit_rate_lru": hit_rates["lru"]["hit_rate"],
        "task_switch_us": switch["task_switch_us"],
        "kv_copy_switch_us": switch["kv_copy_switch_us"],
        "reuse_action_error": reuse["pi05_tiny"]["action_error"],
        "reuse_answer_change_rate": reuse["smollm2"]["answer_change_rate"],
    }
    params = {"images": images, "prompt_tokens": prompt_tokens, "repeats": repeats, "rounds": rounds,
              "scene_tokens": scene_tokens, "answer_tokens": answer_tokens, "reuse_threshold": reuse_threshold,
              "reuse_frames": reuse_frames}  # fmt: skip
    details = {"restore": restore, "hit_rates": hit_rates, "task_switch": switch, "reuse": reuse,
               "preemption": preemption}  # fmt: skip
    return result("tiers", metrics, details, params)


def _prompt(bundle: ModelBundle, num_tokens: int) -> str:
    """A prompt of exactly ``num_tokens`` tokens (the paper pads pi0.5's prompt to 100)."""
    prompt = "pick up the red cup"
    while len(bundle.tokenizer.encode(prompt)) < num_tokens:
        prompt += " and the cup"
    while len(bundle.tokenizer.encode(prompt)) > num_tokens:
        prompt = prompt[: prompt.rindex(" ")]
    assert len(bundle.tokenizer.encode(prompt)) == num_tokens, "could not build a prompt of the wanted length"
    return prompt


def _push_out_of_pool(engine: Engine) -> None:
    """Every cached pool block evicted (and so demoted to the tiers) without running anything, and written: L2 is
    timed reading its files, not its writer's queue."""
    engine.pool.release(engine.pool.allocate(engine.pool.num_available))
    disk = engine.tiers.disk if engine.tiers is not None else None
    if disk is not None and not disk.flush(60.0):
        raise RuntimeError("the disk tier's writer did not finish within 60 s")


def _observation_request(bundle: ModelBundle, images: int, prompt_tokens: int) -> GenerateRequest:
    """One text token about a pi05-causal-tiny observation of ``images`` camera images and a ``prompt_tokens`` prompt."""
    rng = np.random.default_rng(0)
    obs = Observation("scene", images=[camera_image(int(rng.integers(2**31))) for _ in range(images)])
    return GenerateRequest(_prompt(bundle, prompt_tokens), observation=obs, sampling=SamplingParams(max_new_tokens=1))


def _restore(bundle: ModelBundle, images: int, prompt_tokens: int, repeats: int) -> dict[str, Any]:
    request = _observation_request(bundle, images, prompt_tokens)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="oxygen-tiers-") as folder:
        setups = {
            "recompute": {},
            "l1": {"cpu_tier_bytes": 256 << 20},
            "l2": {"disk_tier_path": folder},
        }
        for name, tier in tqdm(setups.items(), desc="restore", unit="tier"):
            engine = Engine(EngineConfig(**RESTORE_POOL, **tier), bundle=bundle)
            first = engine.generate([request])[0]
            times, reused = [], []
            for _ in range(repeats):
                if name == "recompute":
                    engine.pool.reset_prefix_cache()
                else:
                    _push_out_of_pool(engine)
                start = time.perf_counter()
                again = engine.generate([request])[0]
                times.append((time.perf_counter() - start) * 1e3)
                reused.append(again.reused_prefix_tokens)
                assert again.token_ids == first.token_ids, f"{name}: the restored prefix changed the answer"
            out[f"{name}_ms"] = statistics.median(times)
            out[f"{name}_reused_tokens"] = reused
            out[f"{name}_tiers"] = [vars(t) for t in engine.stats().tiers]
        out["prefix_tokens"] = first.prompt_tokens
    return out


def _hit_rates(bundle: ModelBundle, rounds: int, scene_tokens: int, answer_tokens: int) -> dict[str, Any]:
    workload = robot_workload(bundle.tokenizer, rounds, scene_tokens=scene_tokens, answer_tokens=answer_tokens)
    base = {"kv_cache_bytes": 1 << 30, "max_model_len": 2048}
    reference = Engine(EngineConfig(**base), bundle=bundle)
    expected = replay(reference, workload)
    blocks = pressure_pool_blocks(reference, expected)
    out: dict[str, Any] = {"working_set_blocks": working_set_blocks(reference), "pool_blocks": blocks,
                           "requests": workload.num_requests, "tasks": workload.num_tasks}  # fmt: skip
    for policy in tqdm(("lru", "attention"), desc="hit rate", unit="policy"):
        config = EngineConfig(**(base | {"kv_cache_bytes": blocks * reference.layout.bytes_per_block}),
                              eviction_policy=policy)  # fmt: skip
        engine = Engine(config, bundle=bundle)
        start = time.perf_counter()
        outs = replay(engine, workload)
        out[policy] = {
            "hit_rate": engine.pool.prefix_hit_rate,
            "evictions": engine.pool.evictions,
            "seconds": time.perf_counter() - start,
            "same_tokens_as_unpressured": all(a.token_ids == b.token_ids for a, b in zip(outs, expected)),
        }
    return out


def _preemption(bundle: ModelBundle) -> dict[str, Any]:
    roomy = run_preemption(Engine(EngineConfig(kv_cache_bytes=64 << 20), bundle=bundle))
    out: dict[str, Any] = {"roomy_s": roomy.seconds, "roomy_computed_tokens": roomy.computed_tokens}
    for mode in tqdm(("swap", "recompute", "auto"), desc="preemption", unit="mode"):
        config = EngineConfig(kv_cache_bytes=1 << 20, preemption_mode=mode, cpu_tier_bytes=64 << 20,
                              cpu_tier_format="pool")  # fmt: skip
        bpb = Engine(config, bundle=bundle).layout.bytes_per_block
        engine = Engine(replace(config, kv_cache_bytes=POOL_BLOCKS * bpb), bundle=bundle)
        run = run_preemption(engine)
        costs = engine.kv_manager.costs
        out[mode] = {
            "seconds": run.seconds,
            "computed_tokens": run.computed_tokens,
            "swapped": costs.swapped,
            "recomputed": costs.recomputed,
            "swap_bytes_per_s": costs.swap_bytes_per_s,
            "recompute_tokens_per_s": costs.recompute_tokens_per_s,
            "same_tokens_as_roomy": run.token_ids == roomy.token_ids,
        }
    return out
