"""Linear layers whose weights oneDNN has reordered into the blocked layout it reads fastest on this CPU.

A decode step is a sequence of matrix-vector products over every weight, so its speed is the speed weights stream
through the cores.  torch's default fp32 ``F.linear`` on a weight stored row-major reads about 11 GB/s here (batch 1,
two threads); the same product on a weight oneDNN has prepacked reads about twice that, and at batch 8-32 it is also
twice as fast (``bench --suite peers`` measures both against the machine's read bandwidth).  Packing is done once
after loading, replaces the module (the row-major copy is freed), and changes only the order of fp32 additions: the
engine's token-for-token tests against transformers run on packed weights.
"""

import torch
from torch import nn

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], self.out_features)


def pack_linears(module: nn.Module) -> None:
    """Replace every ``nn.Linear`` below ``module`` by a ``PackedLinear`` of the same weights."""
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, PackedLinear(child.weight, child.bias))
        else:
            pack_linears(child)
