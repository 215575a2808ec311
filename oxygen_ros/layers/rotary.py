"""Rotary position embedding (RoPE), HF "rotate_half" convention, used by Llama and Gemma decoders."""

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """Applies RoPE to q/k at arbitrary integer positions (tokens of a ragged batch sit at different positions).

    The inverse frequencies are kept in fp32 outside the module's buffers, so ``model.to(bfloat16)`` cannot round
    them (in bf16 that would rotate position ~900 by more than a radian).
    """

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self._inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T]; q [T, H, D], k [T, KVH, D] -> rotated q, k (same dtype)."""
        if self._inv_freq.device != positions.device:
            self._inv_freq = self._inv_freq.to(positions.device)
        freqs = positions.to(torch.float32)[:, None] * self._inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        return _rotate(q, cos, sin), _rotate(k, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)
