"""pi0.5's action expert: a smaller Gemma whose action tokens read the backbone's prefix K/V from the pool.

Mixture-of-Transformers at inference: at every layer ``i`` the expert's own Q/K/V (its own weights) meet the backbone's
cached K/V of layer ``i``.  Action tokens see the whole prefix and each other (a bidirectional region over the whole context); nothing of theirs is
stored (``slot_mapping`` all -1), so many denoising steps, and many sequences sharing one prefix's blocks, read the same
pool blocks without ever writing them.  The flow-matching time conditions every norm through adaptive RMSNorm
(pi0.5's adaRMS), and the action tokens themselves are just the projected noisy actions (no time concatenation as in
pi0).  Positions continue after the prefix, as openpi's suffix positions do.
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


class ActionExpert(nn.Module):
    """Predicts the flow-matching velocity of an action chunk given the prefix in the pool.  Parameter names are
    LeRobot's pi0.5 names under ``model.`` (``action_in_proj``, ``time_mlp_in``, ``layers.N.input_layernorm.dense``)."""

    def __init__(self, cfg: VlaConfig) -> None:
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
        return integrate_flow(self.velocity, self.rotary, block_tables, prefix_lens, kv, num_steps, noise,
                              self.action_in_proj.weight.dtype)
