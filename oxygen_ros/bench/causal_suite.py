"""`bench --suite causal`: the action error of the causal-prompt approximation (``pi05-causal-*``) against pi0.5's
faithful prefix, the same weights on both sides.

pi0.5 makes its whole prefix [images | prompt with the state] bidirectional; the approximation keeps the images
bidirectional and the prompt causal after them, so image blocks are shared across prompts.  Here one model
(``pi05-random-tiny``: the faithful pi0.5 at seeded random weights) prefills each observation's prefix twice, with
the same token ids, once wholly bidirectional and once causal after the images, and samples one chunk from each
with the same noise.  The error is set against how much the faithful chunk moves between two observations (the
next frame, the same noise), the scale at which an action error starts to matter.  Random weights: the number says
how far the two attention patterns drift apart in an untrained network of pi0.5's shape, not what a trained pi0.5
would lose.  (``pi05-causal-*`` also writes the state as reserved token ids instead of text; that difference is
not measured here.)
"""

import statistics
from typing import Any

import numpy as np
import torch

from oxygen_ros.bench.report import result
from oxygen_ros.bench.robot_frames import PROMPT, camera_image
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.models.pi05 import Pi05Model
from oxygen_ros.models.registry import load_model

BLOCK_SIZE = 16


@torch.no_grad()
def chunk(model: Pi05Model, token_ids: list[int], pixels: torch.Tensor, bidirectional: int,
          noise: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """One chunk [H, A] after prefilling the prefix in one step, its first ``bidirectional`` tokens seeing each other
    and the rest causal, into a pool of its own."""
    n = len(token_ids)
    blocks = list(range(-(-n // BLOCK_SIZE)))
    kv = KVCache(model.kv_layout(BLOCK_SIZE, torch.float32), len(blocks), torch.device("cpu"))
    ctx, positions = kv.steps.batch([blocks], [0], [n], [bidirectional])
    embeds = model.embed_span(token_ids, 0, n, model.encode_images(pixels) if len(pixels) else None)
    model(torch.tensor(token_ids), positions, ctx, kv, input_embeds=embeds)
    return model.sample_actions(torch.tensor([blocks]), [n], kv, noise=noise[None])[0]


def run(observations: int = 8, images: int = 3, seed: int = 0, threads: int = 1) -> dict[str, Any]:
    torch.set_num_threads(threads)
    bundle = load_model("pi05-random-tiny", torch.device("cpu"), torch.float32, seed)
    model, cfg = bundle.model, bundle.model.config
    rng = np.random.default_rng(seed)
    noise = torch.randn(cfg.action_horizon, cfg.action_dim, generator=torch.Generator().manual_seed(seed))
    faithful, causal = [], []
    for _ in range(observations + 1):  # one more: the last observation is only the "next frame" of the one before
        frames = [camera_image(int(rng.integers(2**31))) for _ in range(images)]
        prefix = model.observation_prefix(bundle.tokenizer, PROMPT, frames, rng.uniform(-1, 1, 8).round(3))
        ids, image_tokens = prefix.token_ids, images * cfg.tokens_per_image
        faithful.append(chunk(model, ids, prefix.pixels, len(ids), noise))
        causal.append(chunk(model, ids, prefix.pixels, image_tokens, noise))

    def mse(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).square().mean())

    error = [mse(c, f) for c, f in zip(causal[:-1], faithful[:-1])]
    moved = [mse(f, g) for f, g in zip(faithful[:-1], faithful[1:])]
    relative = [float((c - f).norm() / f.norm()) for c, f in zip(causal[:-1], faithful[:-1])]
    metrics = {
        "action_mse_causal_vs_faithful": statistics.fmean(error),
        "action_mse_next_observation": statistics.fmean(moved),
        "causal_error_vs_observation_change": statistics.fmean(error) / statistics.fmean(moved),
        "action_relative_error": statistics.fmean(relative),
        "action_max_abs_error": max(float((c - f).abs().max()) for c, f in zip(causal[:-1], faithful[:-1])),
    }
    details = {"per_observation_mse": error, "prefix_tokens": len(ids), "image_tokens": image_tokens}
    return result("causal", metrics, details, {"observations": observations, "images": images, "seed": seed,
                                                "threads": threads, "model": "pi05-random-tiny"})  # fmt: skip
