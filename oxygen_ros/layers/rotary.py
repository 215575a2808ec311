"""Rotary position embedding (RoPE), HF "rotate_half" convention, used by Llama and Gemma decoders.

A model computes the angles of a step's positions once (``RotaryEmbedding.angles``) and every layer applies them:
the cosines and sines are the same in every layer, so computing them per layer was thirty times the work.

Scaled RoPE changes only the inverse frequencies (``RopeScaling``): Llama 3.1's ``llama3`` (low frequencies divided by
``factor``, the band between smoothed) and ``linear`` (all divided by ``factor``), as transformers'
``modeling_rope_utils`` computes them, and ``freq_factors``: one divisor per frequency, the ``rope_freqs`` tensor
llama.cpp's converter writes into a Llama 3.1 GGUF in place of the llama3 parameters (ggml's rope divides each
frequency by its factor). ``dynamic`` NTK depends on the longest sequence seen, which differs per request
in a shared batch, and YaRN also scales attention: neither is implemented (the loaders refuse them, naming the type).
"""

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RopeScaling:
    """A config's ``rope_scaling`` / ``rope_parameters`` of type ``llama3`` or ``linear``, or a GGUF's ``rope_freqs``
    (type ``freq_factors``)."""

    rope_type: str
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3 only
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    freq_factors: tuple[float, ...] = ()  # freq_factors only: head_dim / 2 divisors

    def inverse_frequencies(self, inv_freq: torch.Tensor) -> torch.Tensor:
        if self.rope_type == "freq_factors":
            if len(self.freq_factors) != inv_freq.numel():
                raise ValueError(f"rope_freqs has {len(self.freq_factors)} factors for {inv_freq.numel()} frequencies")
            return inv_freq / torch.tensor(self.freq_factors, dtype=torch.float32, device=inv_freq.device)
        if self.rope_type == "linear":
            return inv_freq / self.factor
        low_wavelen = self.original_max_position_embeddings / self.low_freq_factor
        high_wavelen = self.original_max_position_embeddings / self.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / self.factor, inv_freq)
        smooth = (self.original_max_position_embeddings / wavelen - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(medium, smoothed, scaled)


@dataclass(frozen=True)
class RopeAngles:
    """cos/sin [T, 1, head_dim] (fp32) of a ragged batch's positions, broadcast over heads."""

    cos: torch.Tensor
    sin: torch.Tensor

    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q [T, H, D], k [T, KVH, D] -> rotated q, k (same dtype)."""
        return _rotate(q, self.cos, self.sin), _rotate(k, self.cos, self.sin)

    def apply_joined(self, qk: torch.Tensor) -> torch.Tensor:
        """q and k side by side as [T, H + KVH, D] (a fused projection's first columns) -> both rotated, in one pass:
        the same arithmetic per element, half the ops per layer."""
        return _rotate(qk, self.cos, self.sin)


class RotaryEmbedding:
    """The angles at arbitrary integer positions (tokens of a ragged batch sit at different positions).

    The inverse frequencies are kept in fp32 and are no module buffer, so ``model.to(bfloat16)`` cannot round them
    (in bf16 that would rotate position ~900 by more than a radian). They are made on the CPU even when the model is
    built on the meta device (loaders build it there and assign the weights read).
    """

    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling | None = None) -> None:
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim
        self._inv_freq = 1.0 / (theta**exponents)
        if scaling is not None:
            self._inv_freq = scaling.inverse_frequencies(self._inv_freq)

    def angles(self, positions: torch.Tensor) -> RopeAngles:
        if self._inv_freq.device != positions.device:
            self._inv_freq = self._inv_freq.to(positions.device)
        freqs = positions.to(torch.float32)[:, None] * self._inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return RopeAngles(emb.cos()[:, None, :], emb.sin()[:, None, :])


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)
