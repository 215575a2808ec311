"""Where a step's new K/V goes in one format's view: which of the step's tokens are stored, at which slots.

Built from the host copy of the slots once per step, so a layer writes with ``index_select`` / ``index_copy_`` and
never masks by ``slot >= 0`` (a boolean mask is a host sync, thirty times a step).
"""

from dataclasses import dataclass, replace

import torch

from oxygen_ros.kernels.quant import BlockFills


@dataclass(frozen=True)
class KVWrite:
    fmt: int  # index into the pool layout's formats
    rows: torch.Tensor | None  # positions of the stored tokens among the step's new tokens; None = all, in order
    slots: torch.Tensor  # [stored tokens] slots in the format's view, all >= 0
    host_slots: list[int]  # the same slots on the host
    fills: BlockFills | None = None  # int8 keys on the torch path: the blocks the write fills (StepBuilder.plan)

    def with_fills(self, block_size: int) -> "KVWrite":
        return replace(self, fills=BlockFills.of(self.host_slots, block_size, self.slots.device))


def stored_tokens(fmt: int, slots: list[int], device: torch.device, as_tensor: torch.Tensor | None = None
                  ) -> KVWrite | None:  # fmt: skip
    """The write of the tokens whose slot is >= 0 (None if there is none); ``as_tensor``: ``slots`` already on the
    device, reused when every token is stored."""
    rows = [t for t, slot in enumerate(slots) if slot >= 0]
    if not rows:
        return None
    if len(rows) == len(slots):
        return KVWrite(fmt, None, as_tensor if as_tensor is not None else torch.tensor(slots, device=device), slots)
    kept = [slots[t] for t in rows]
    return KVWrite(fmt, torch.tensor(rows, dtype=torch.long, device=device),
                   torch.tensor(kept, dtype=torch.long, device=device), kept)  # fmt: skip
