"""pi0's action expert: a smaller Gemma whose state token and action tokens attend to the prefix in the pool.

pi0's suffix is [state token | H action tokens].  The state token sees the prefix and itself, never the actions, so
its K/V is the same at every denoising step: ``write_state`` computes it once, through the expert's weights, into
the pool slot right after the prefix, as one decode-like step.  The action tokens then attend to [prefix | state]
from the pool and to each other (``integrate_flow``; their own K/V is never stored).  transformers and openpi
recompute the state token at every step; the values are the same.

Unlike pi0.5, time enters through the action tokens themselves (an MLP over [action embedding | time embedding]) and
the norms are plain Gemma RMSNorm.  Parameter names are LeRobot's (``state_proj``, ``action_time_mlp_in``, ...).
"""

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.layers.rotary import RopeAngles, RotaryEmbedding
from oxygen_ros.models.common.flow import integrate_flow, time_embedding
from oxygen_ros.models.common.gemma import GemmaDecoderLayer, GemmaRMSNorm
from oxygen_ros.models.common.vla_config import VlaConfig


class Pi0ActionExpert(nn.Module):
    """Flow-matching velocity of an action chunk given [prefix | state token] in the pool."""

    def __init__(self, cfg: VlaConfig) -> None:
        super().__init__()
        e, width = cfg.expert, cfg.expert.hidden_size
        self.min_period, self.max_period = cfg.min_period, cfg.max_period
        self.rotary = RotaryEmbedding(e.head_dim, e.rope_theta)
        self.layers = nn.ModuleList(GemmaDecoderLayer(e, i) for i in range(e.num_layers))
        self.norm = GemmaRMSNorm(width, e.rms_norm_eps)
        self.state_proj = nn.Linear(cfg.state_dim, width)
        self.action_in_proj = nn.Linear(cfg.action_dim, width)
        self.action_time_mlp_in = nn.Linear(2 * width, width)
        self.action_time_mlp_out = nn.Linear(width, width)
        self.action_out_proj = nn.Linear(width, cfg.action_dim)

    def write_state(
        self, state: torch.Tensor, block_tables: torch.Tensor, prefix_lens: list[int], kv: KVCache
    ) -> None:
        """K/V of each sequence's state token (state [B, state_dim]) into the pool after its prefix, every layer."""
        ctx = kv.steps.state_tokens(block_tables, prefix_lens)
        rope = self.rotary.angles(torch.tensor(prefix_lens, device=block_tables.device))
        h = self.state_proj(state.to(self.state_proj.weight.dtype))
        for layer in self.layers:
            h = layer(h, rope, ctx, kv)

    def velocity(
        self, x_t: torch.Tensor, t: torch.Tensor, rope: RopeAngles, ctx: StepContext, kv: KVCache
    ) -> torch.Tensor:
        """Noisy actions x_t [B, H, A] at times t [B] -> velocity [B, H, A] (fp32)."""
        B, H, _ = x_t.shape
        dtype = self.action_in_proj.weight.dtype
        actions = self.action_in_proj(x_t.to(dtype))
        times = time_embedding(t, actions.shape[-1], self.min_period, self.max_period, torch.float32)
        fused = torch.cat([actions, times.to(dtype)[:, None, :].expand_as(actions)], dim=-1)
        h = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(fused))).flatten(0, 1)
        for layer in self.layers:
            h = layer(h, rope, ctx, kv)
        return self.action_out_proj(self.norm(h)[0]).view(B, H, -1).float()

    def sample_actions(
        self, block_tables: torch.Tensor, context_lens: list[int], kv: KVCache, num_steps: int, noise: torch.Tensor
    ) -> torch.Tensor:
        """Euler integration over contexts of ``context_lens[b]`` tokens: the prefix and the state token after it."""
        return integrate_flow(self.velocity, self.rotary, block_tables, context_lens, kv, num_steps, noise,
                              self.action_in_proj.weight.dtype)
