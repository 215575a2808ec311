"""pi0.5's action expert: a smaller Gemma whose action tokens read the backbone's prefix K/V from the pool.

Mixture-of-Transformers at inference: at every layer ``i`` the expert's own Q/K/V (its own weights) meet the backbone's
cached K/V of layer ``i``.  Action tokens see the whole prefix and each other (a bidirectional region over the whole context); nothing of theirs is
stored (``slot_mapping`` all -1), so many denoising steps, and many sequences sharing one prefix's blocks, read the same
pool blocks without ever writing them.  The flow-matching time conditions every norm through adaptive RMSNorm
(pi0.5's adaRMS), and the action tokens themselves are just the projected noisy actions (no time concatenation as in
pi0).  Positions continue after the prefix, as openpi's suffix positions do.
"""

import math
from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.layers.rotary import RopeAngles, RotaryEmbedding
from oxygen_ros.models.pi05.config import GemmaConfig
from oxygen_ros.models.pi05.gemma import GemmaDecoderLayer, GemmaRMSNorm

TIME_MIN_PERIOD = 4e-3  # openpi's sine-cosine time embedding periods
TIME_MAX_PERIOD = 4.0


def action_context(block_tables: torch.Tensor, prefix_lens: list[int], horizon: int) -> StepContext:
    """The step context of ``horizon`` action tokens per sequence after a prefix already in the pool."""
    return StepContext(
        slot_mapping=torch.full((len(prefix_lens) * horizon,), -1, dtype=torch.int64, device=block_tables.device),
        query_lens=[horizon] * len(prefix_lens),
        context_lens=[p + horizon for p in prefix_lens],
        block_tables=block_tables,
        bidirectional_lens=[p + horizon for p in prefix_lens],
    )


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
    num_steps: int, noise: torch.Tensor,
) -> torch.Tensor:
    """Euler integration of the flow from t=1 (noise [B, H, A]) to t=0: x <- x + dt * v, dt = -1/num_steps.

    ``velocity(x_t, t, rope, ctx, kv)`` is an expert's; sequence b's context is its first ``prefix_lens[b]`` tokens
    in ``block_tables[b]`` (rows may share blocks), the action tokens sit at the positions that follow it.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    B, H, _ = noise.shape
    device = noise.device
    ctx = action_context(block_tables, prefix_lens, H)
    kv.bind(ctx)  # once for every denoising step
    rope = rotary.angles(torch.cat([torch.arange(p, p + H, device=device) for p in prefix_lens]))
    x = noise.float()
    dt = -1.0 / num_steps
    for step in range(num_steps):
        t = torch.full((B,), 1.0 - step / num_steps, device=device)
        x = x + dt * velocity(x, t, rope, ctx, kv)
    return x


class ExpertShapes(Protocol):
    """What the adaRMS expert needs of a config (our Pi05Config and the LeRobot pi0.5's Pi0Config both have it)."""

    expert: GemmaConfig
    action_dim: int
    min_period: float
    max_period: float


class ActionExpert(nn.Module):
    """Predicts the flow-matching velocity of an action chunk given the prefix in the pool.  Parameter names are
    LeRobot's pi0.5 names under ``model.`` (``action_in_proj``, ``time_mlp_in``, ``layers.N.input_layernorm.dense``)."""

    def __init__(self, cfg: ExpertShapes) -> None:
        super().__init__()
        e, width = cfg.expert, cfg.expert.hidden_size
        self.min_period, self.max_period = cfg.min_period, cfg.max_period
        self.rotary = RotaryEmbedding(e.head_dim, e.rope_theta)
        self.action_in_proj = nn.Linear(cfg.action_dim, width)
        self.time_mlp_in = nn.Linear(width, width)
        self.time_mlp_out = nn.Linear(width, width)
        self.layers = nn.ModuleList(GemmaDecoderLayer(e, i, cond_dim=width) for i in range(e.num_layers))
        self.norm = GemmaRMSNorm(width, e.rms_norm_eps, cond_dim=width)
        self.action_out_proj = nn.Linear(width, cfg.action_dim)

    def condition(self, t: torch.Tensor) -> torch.Tensor:
        """Times t [B] -> the adaRMS conditioning [B, width]: silu(mlp_out(silu(mlp_in(sincos(t))))), the sine-cosine
        embedding in fp64 then cast to the weights' dtype, as openpi and LeRobot compute it."""
        dtype = self.time_mlp_in.weight.dtype
        emb = time_embedding(t, self.time_mlp_in.in_features, self.min_period, self.max_period).to(dtype)
        return F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb))))

    def velocity(
        self, x_t: torch.Tensor, t: torch.Tensor, rope: RopeAngles, ctx: StepContext, kv: KVCache
    ) -> torch.Tensor:
        """Noisy actions x_t [B, H, A] at times t [B] -> velocity [B, H, A] (fp32)."""
        B, H, _ = x_t.shape
        h = self.action_in_proj(x_t.to(self.action_in_proj.weight.dtype)).flatten(0, 1)
        cond = self.condition(t).repeat_interleave(H, dim=0)
        for layer in self.layers:
            h = layer(h, rope, ctx, kv, cond)
        h = self.norm(h, cond)[0]
        return self.action_out_proj(h).view(B, H, -1).float()

    def sample_actions(
        self, block_tables: torch.Tensor, prefix_lens: list[int], kv: KVCache, num_steps: int, noise: torch.Tensor
    ) -> torch.Tensor:
        """Euler integration of the flow (``integrate_flow``) over the prefixes in the pool."""
        return integrate_flow(self.velocity, self.rotary, block_tables, prefix_lens, kv, num_steps, noise)
