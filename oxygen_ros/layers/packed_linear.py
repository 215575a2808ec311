"""Linear layers whose weights oneDNN has reordered into the blocked layout it reads fastest on this CPU.

A decode step is a sequence of matrix-vector products over every weight, so its speed is the speed weights stream
through the cores.  torch's default fp32 ``F.linear`` on a weight stored row-major reads about 11 GB/s here (batch 1,
two threads); the same product on a weight oneDNN has prepacked reads about twice that, and at batch 8-32 it is also
twice as fast (``bench --suite peers`` measures both against the machine's read bandwidth).  Packing is done once
after loading, replaces the module (the row-major copy is freed), and changes only the order of fp32 additions: the
engine's token-for-token tests against transformers run on packed weights.

A single row (batch-1 decode) goes to ``cpu_matvec`` instead where it runs: it reads the weight at nearly the
machine's DRAM rate, where oneDNN reads it at half. That needs the row-major weight as well, so a packed layer keeps
both (for a tied LM head the embedding table is that copy already): on a CPU the weights take twice their size,
~1 GB for SmolLM2-135M, for a ~1.3x faster batch-1 token.
"""

import torch
from torch import nn

from oxygen_ros.layers.cpu_matvec import can_stream, matvec_kernel

BATCH_HINT = 32  # rows oneDNN tunes the layout for; measured as good from 1 to 512 rows


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    return (device.type == "cpu" and dtype in (torch.float32, torch.bfloat16) and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))  # fmt: skip


class PackedLinear(nn.Module):
    """``x @ weight.T + bias`` with a prepacked weight (inference only: the weight is no parameter)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), BATCH_HINT)
        self.bias = None if bias is None else bias.detach()
        self.matvec = matvec_kernel() if can_stream(weight) else None
        self.rows = weight.detach() if self.matvec is not None else None  # row-major, for the one-row product

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if self.matvec is not None and flat.shape[0] == 1 and can_stream(flat):
            out = self.matvec(self.rows, flat[0])[None]
            if self.bias is not None:
                out += self.bias
        else:
            out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], self.out_features)


def pack_linears(module: nn.Module) -> None:
    """Replace every ``nn.Linear`` below ``module`` by a ``PackedLinear`` of the same weights."""
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, PackedLinear(child.weight, child.bias))
        else:
            pack_linears(child)
