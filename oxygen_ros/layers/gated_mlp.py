"""The gated MLP of every decoder we serve: ``down(act(gate(x)) * up(x))``, SwiGLU (Llama, Qwen, SmolLM: SiLU) or
GeGLU (Gemma, pi0 / pi0.5: tanh-approximated GELU).

Weights load under Hugging Face's names (``gate_proj``, ``up_proj``, ``down_proj``); ``fuse_projections`` then makes
gate and up one [gate | up] product (one weight read per step instead of two), which ``packed_linear`` prepacks for
the CPU like any other projection. SiLU(gate) * up runs as one C call on a CPU where the kernels run
(``cpu_row_ops.silu_mul``).
"""

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_ros.kernels import cpu_row_ops

Activation = Literal["silu", "gelu_tanh"]


class GatedMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int, activation: Activation) -> None:
        super().__init__()
        self.activation = activation
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.gate_up_proj: nn.Linear | None = None  # set by fuse_projections

    def fuse_projections(self) -> None:
        """One [gate | up] projection instead of two (weights load under Hugging Face's names first, then fuse; once)."""
        if self.gate_up_proj is not None:
            return
        weight = torch.cat([self.gate_proj.weight, self.up_proj.weight])
        self.gate_up_proj = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device,
                                      dtype=weight.dtype)  # fmt: skip
        with torch.no_grad():
            self.gate_up_proj.weight.copy_(weight)
        del self.gate_proj, self.up_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_proj is None:
            return self.down_proj(self._act(self.gate_proj(x)) * self.up_proj(x))
        gate_up = self.gate_up_proj(x)
        act = cpu_row_ops.silu_mul(gate_up) if self.activation == "silu" else None
        if act is None:
            gate, up = gate_up.chunk(2, dim=-1)
            act = self._act(gate) * up
        return self.down_proj(act)

    def _act(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x) if self.activation == "silu" else F.gelu(x, approximate="tanh")
