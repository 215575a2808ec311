"""RMSNorm as Llama-family decoders compute it: in fp32, then cast back (matters for token-exact agreement with
transformers). Used for the residual stream and, in Qwen3, per head on the queries and keys."""

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_ros.kernels import cpu_row_ops


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32 then cast back, as HF Llama does (matters for token-exact agreement)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 == self.weight.dtype:  # the weight inside the one op: (x * rsqrt(...)) * w, as HF
            out = cpu_row_ops.rms_norm(x, self.weight, self.eps)
            return out if out is not None else F.rms_norm(x, self.weight.shape, self.weight, eps=self.eps)
        h = F.rms_norm(x.to(torch.float32), self.weight.shape, eps=self.eps)  # one op; bit-equal to x * rsqrt(...)
        return self.weight * h.to(x.dtype)

    def add_forward(self, h: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h + delta, norm(h + delta))``: a residual connection and the norm after it, in one pass where the CPU
        kernel runs."""
        if h.dtype == torch.float32 == self.weight.dtype:
            fused = cpu_row_ops.add_rms_norm(h, delta, self.weight, self.eps)
            if fused is not None:
                return fused
        total = h + delta
        return total, self(total)
