"""`bench --suite pacing`: the inference node's serving loop with and without frame pacing, side by side.

The node does not own the frame clock: a task node's control loop sends an action request every period (with the
period as its deadline) while language requests arrive and decode on the same engine thread. Without pacing a
language step that starts just before a chunk is asked for delays that chunk by up to a whole step (a new question's
prefill is the long one); with pacing (``oxygen_ros.engine.pacing``) the thread learns the stream's period and
holds such steps. Every ``every`` frames a question about a new ``context``-token text observation arrives and
decodes ``tokens`` tokens. Each run uses a fresh pi05-causal-tiny engine on its own AsyncEngine thread, fed by this thread
at the stream's rate; paced and unpaced runs alternate ``repeats`` times so machine load hits both alike. Reported:
action latency (the caller's submit -> chunk) p50/p99, deadline miss rate, language tokens/s, time language was held.
"""

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from oxygen_ros.bench.report import result
from oxygen_ros.bench.robot_frames import robot_frames
from oxygen_ros.bench.scene_text import observation_text
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.async_engine import AsyncEngine
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation, RequestOutput
from oxygen_ros.engine.pacing import FramePacer
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.models.registry import ModelBundle, load_model

TIMEOUT_S = 600


@dataclass
class StreamRun:
    chunks: list[RequestOutput]
    language: list[RequestOutput]
    seconds: float  # from the first chunk request to the last answer
    held_s: float


def language_requests(count: int, tokens: int, observation: Observation | None = None) -> list[GenerateRequest]:
    sampling = SamplingParams(max_new_tokens=tokens, ignore_eos=True)
    return [
        GenerateRequest(
            f"describe part {i} of the table", task_id="language", observation=observation, sampling=sampling
        )
        for i in range(count)
    ]


def serve_stream(
    engine: Engine, pacer: FramePacer | None, period_s: float, frames: int, language: dict[int, list[GenerateRequest]]
) -> StreamRun:
    """An action request every ``period_s`` (deadline: one period) from this thread, and ``language[i]`` submitted
    right after frame i's chunk request, all through one AsyncEngine; shut down before returning."""
    serving = AsyncEngine(engine, pacer=pacer)
    try:
        chunks, texts = [], []
        start = time.perf_counter()
        for i, frame in enumerate(robot_frames([0] * frames, max_new_tokens=1, images=0, seed=7)):
            time.sleep(max(0.0, start + i * period_s - time.perf_counter()))
            action = frame.actions[0]
            action.deadline_s = period_s
            chunks.append(serving.submit(action))
            texts += [serving.submit(g) for g in language.get(i, [])]
        out = StreamRun([f.result(TIMEOUT_S) for f in chunks], [f.result(TIMEOUT_S) for f in texts], 0.0, 0.0)
        out.seconds = time.perf_counter() - start
        out.held_s = serving.stats().paced_hold_s
        return out
    finally:
        serving.shutdown(TIMEOUT_S)


def _summary(runs: list[StreamRun]) -> dict[str, float]:
    chunks = [c for r in runs for c in r.chunks]
    served = sorted(c.latency_ms for c in chunks if c.ok)
    tokens = sum(o.generated_tokens for r in runs for o in r.language)
    return {
        "action_latency_p50_ms": statistics.median(served) if served else float("nan"),
        "action_latency_p99_ms": served[min(len(served) - 1, int(0.99 * len(served)))] if served else float("nan"),
        "deadline_miss_rate": sum(not c.ok for c in chunks) / len(chunks),
        "language_tokens_per_s": tokens / sum(r.seconds for r in runs),
        "held_s_per_run": sum(r.held_s for r in runs) / len(runs),
    }


def run(
    rate_hz: float = 10.0,
    frames: int = 40,
    every: int = 2,
    context: int = 300,
    tokens: int = 24,
    repeats: int = 3,
    k: int = 0,
) -> dict[str, Any]:
    torch.set_num_threads(1)
    bundle: ModelBundle = load_model("pi05-causal-tiny", torch.device("cpu"), torch.float32, seed=0)
    config = EngineConfig(model="pi05-causal-tiny", kv_cache_bytes=128 << 20, max_model_len=2048)
    period = 1.0 / rate_hz
    runs: dict[str, list[StreamRun]] = {"paced": [], "unpaced": []}
    for _ in tqdm(range(repeats), desc="pacing: paced / unpaced runs", unit="pair"):
        for name in runs:
            engine = Engine(config, bundle)
            language = {
                i: language_requests(1, tokens, Observation(text=observation_text(engine.tokenizer, context, seed=i)))
                for i in range(2, frames, every)
            }
            runs[name].append(
                serve_stream(engine, FramePacer(k) if name == "paced" else None, period, frames, language)
            )
    paced, unpaced = _summary(runs["paced"]), _summary(runs["unpaced"])
    same_text = all(
        [o.token_ids for o in a.language] == [o.token_ids for o in b.language]
        for a, b in zip(runs["paced"], runs["unpaced"], strict=True)
    )
    metrics = {
        "action_p99_ratio_paced_vs_unpaced": paced["action_latency_p99_ms"] / unpaced["action_latency_p99_ms"],
        "language_tps_ratio_paced_vs_unpaced": paced["language_tokens_per_s"] / unpaced["language_tokens_per_s"],
        "paced_deadline_miss_rate": paced["deadline_miss_rate"],
        "unpaced_deadline_miss_rate": unpaced["deadline_miss_rate"],
        "same_language_text": same_text,
    }
    details = {"paced": paced, "unpaced": unpaced}
    params = {"rate_hz": rate_hz, "frames": frames, "every": every, "context": context, "tokens": tokens}
    params |= {"repeats": repeats, "k": k}
    return result("pacing", metrics, details, params)
