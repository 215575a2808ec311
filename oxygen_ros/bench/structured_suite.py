"""`bench --suite structured`: what a JSON-schema constraint costs per decoded token, at batch 1 and batch 8.

The same engine (SmolLM2, the real weights) decodes the same questions twice, alternating: constrained by a schema
whose answers are long (an array of eight objects with a bounded name and an integer range), and free (greedy, end
tokens ignored) for exactly as many tokens as each constrained answer took, so both sides decode the same number
of tokens at the same context lengths. The cost is the decode steps' time per decoded token (a step's wall time over
its rows), prefills excluded; the constrained side pays llguidance's mask per row per step and the masking itself.
The first run of each side is a warm-up (the grammar compiles then, on the caller's side as in the node).
"""

import json
import statistics
import time
from typing import Any

import torch
from tqdm import tqdm

from oxygen_ros.bench.report import result
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import Constraint, GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams

SCENE = "A workbench seen from the robot's camera: " + ", ".join(
    f"a {c} {s}" for c, s in [("red", "cup"), ("blue", "box"), ("green", "apple"), ("yellow", "drill"),
                              ("white", "plate"), ("black", "phone"), ("orange", "ball"), ("grey", "bottle")])  # fmt: skip
ITEM = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                         "left_cm": {"type": "integer", "minimum": -99, "maximum": 99}},
        "required": ["name", "left_cm"], "additionalProperties": False}  # fmt: skip
SCHEMA = {"type": "array", "minItems": 8, "maxItems": 8, "items": ITEM}


def _decode_seconds_per_token(engine: Engine, requests: list[GenerateRequest]) -> tuple[float, list[int]]:
    """Run ``requests`` together; (decode steps' seconds per decoded row, each request's generated tokens)."""
    ids = [engine.submit(r) for r in requests]
    seconds, rows, outputs = 0.0, 0, {}
    while engine.has_unfinished:
        start = time.perf_counter()
        finished = engine.step()
        elapsed = time.perf_counter() - start
        if engine.last_batch.is_decode:
            seconds, rows = seconds + elapsed, rows + len(engine.last_batch.requests)
        outputs |= {out.request_id: out for out in finished}
    return seconds / max(rows, 1), [outputs[i].generated_tokens for i in ids]


def run(batches: str = "1,8", repeats: int = 3, threads: int = 2, max_new_tokens: int = 192) -> dict[str, Any]:
    torch.set_num_threads(threads)
    engine = Engine(EngineConfig(model="smollm2-135m", kv_cache_bytes=256 << 20))
    constraint = Constraint("json_schema", json.dumps(SCHEMA))
    sizes = [int(n) for n in batches.split(",")]
    metrics: dict[str, Any] = {}
    details: dict[str, Any] = {}
    progress = tqdm(total=len(sizes) * (repeats + 1), desc="structured: constrained / free pairs", unit="pair")
    for n in sizes:
        observations = [Observation(observation_id=f"bench-{i}", text=f"{SCENE} (view {i})") for i in range(n)]

        def ask(i: int, **fields: Any) -> GenerateRequest:
            return GenerateRequest("List the eight objects as JSON: name and left_cm.", task_type="vqa",
                                   observation=observations[i], **fields)  # fmt: skip

        constrained, free = [], []
        for repeat in range(repeats + 1):
            engine.inputs.prepare_constraint(ask(0, constraint=constraint))  # compiled off the steps, as in the node
            shaped_s, lengths = _decode_seconds_per_token(engine, [
                ask(i, constraint=constraint, sampling=SamplingParams(max_new_tokens=max_new_tokens))
                for i in range(n)])  # fmt: skip
            free_s, _ = _decode_seconds_per_token(engine, [
                ask(i, sampling=SamplingParams(max_new_tokens=max(1, t), ignore_eos=True))
                for i, t in enumerate(lengths)])  # fmt: skip
            if repeat:  # the first pair warms caches up
                constrained.append(shaped_s)
                free.append(free_s)
            progress.update()
        shaped, plain = statistics.median(constrained), statistics.median(free)
        metrics[f"constraint_overhead_n{n}"] = shaped / plain - 1.0
        details[f"n{n}"] = {"constrained_ms_per_token": shaped * 1e3, "free_ms_per_token": plain * 1e3,
                            "answer_tokens": lengths, "runs_constrained_ms": [s * 1e3 for s in constrained],
                            "runs_free_ms": [s * 1e3 for s in free]}  # fmt: skip
    progress.close()
    return result("structured", metrics, details, {"batches": batches, "repeats": repeats, "threads": threads,
                                                    "max_new_tokens": max_new_tokens, "schema": SCHEMA})  # fmt: skip
