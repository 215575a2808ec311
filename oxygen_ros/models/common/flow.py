"""Flow matching over the pool, as pi0 and pi0.5 sample an action chunk: the time embedding, the starting noise and
the Euler integration from noise (t = 1) to actions (t = 0), with the action tokens reading their prefix from the
pool (nothing of theirs is stored)."""

import math
from collections.abc import Callable

import torch

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.layers.rotary import RopeAngles, RotaryEmbedding

TIME_MIN_PERIOD = 4e-3  # openpi's sine-cosine time embedding periods


TIME_MAX_PERIOD = 4.0


def time_embedding(
    t: torch.Tensor, dim: int, min_period: float = TIME_MIN_PERIOD, max_period: float = TIME_MAX_PERIOD,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Sine-cosine embedding of flow-matching times t [B] -> [B, dim], computed in ``dtype``: fp64 for our pi0.5,
    fp32 for pi0, as openpi and transformers' PI0 compute it (so our chunks follow theirs)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=dtype, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angle = (2.0 / period * math.pi)[None, :] * t.to(dtype)[:, None]
    return torch.cat([angle.sin(), angle.cos()], dim=1)


def starting_noise(
    shape: tuple[int, int, int], generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """One standard-normal draw of [B, horizon, action_dim] from ``generator`` (on its device), moved to ``device``."""
    gen_device = generator.device if generator is not None else device
    return torch.randn(shape, generator=generator, device=gen_device).to(device)


Velocity = Callable[[torch.Tensor, torch.Tensor, RopeAngles, StepContext, KVCache], torch.Tensor]


def integrate_flow(
    velocity: Velocity, rotary: RotaryEmbedding, block_tables: torch.Tensor, prefix_lens: list[int], kv: KVCache,
    num_steps: int, noise: torch.Tensor, dtype: torch.dtype,
) -> torch.Tensor:
    """Euler integration of the flow from t=1 (noise [B, H, A]) to t=0: x <- x + dt * v, dt = -1/num_steps.

    ``velocity(x_t, t, rope, ctx, kv)`` is an expert's; sequence b's context is its first ``prefix_lens[b]`` tokens
    in ``block_tables[b]`` (rows may share blocks), the action tokens sit at the positions that follow it;
    ``dtype``: the expert's compute dtype, which its attention reads the prefix K/V in.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    B, H, _ = noise.shape
    device = noise.device
    ctx = kv.steps.actions(block_tables, prefix_lens, H, dtype)  # one context (and prefix K/V) for every step
    rope = rotary.angles(torch.cat([torch.arange(p, p + H, device=device) for p in prefix_lens]))
    x = noise.float()
    dt = -1.0 / num_steps
    for step in range(num_steps):
        t = torch.full((B,), 1.0 - step / num_steps, device=device)
        x = x + dt * velocity(x, t, rope, ctx, kv)
    return x
