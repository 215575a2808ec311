"""Which cached (unreferenced) KV blocks the pool gives up first when it needs room: one class per policy.

``lru`` evicts the block released longest ago.  ``attention`` is the design article's score
``priority = alpha * activity + (1 - alpha) * recency`` (lowest evicted first), where activity is the attention mass a
block received over the last ``window`` decode steps, a by-product of the paged decode kernel (``block_mass``), and
both terms are ranks over the current candidates scaled to [0, 1].  A block that attention keeps coming back to (an
observation's prefix, the attention sinks at the start of a prompt) thus outlives a fresher block nobody reads.
"""

from collections import OrderedDict, deque
from typing import Protocol

import numpy as np
import torch


class EvictionPolicy(Protocol):
    """What the block pool needs of a policy: track the cached set, name victims, optionally learn from attention."""

    wants_attention: bool

    def add(self, block_id: int) -> None: ...
    def remove(self, block_id: int) -> None: ...
    def pop_victims(self, n: int) -> list[int]: ...
    def reset(self, block_id: int) -> None: ...
    def observe(self, block_tables: torch.Tensor, block_mass: torch.Tensor) -> None: ...
    def __len__(self) -> int: ...
    def __contains__(self, block_id: int) -> bool: ...
    def cached_ids(self) -> list[int]: ...


class LRUEviction:
    """Evicts the cached block released longest ago (an exact LRU over release order)."""

    wants_attention = False

    def __init__(self) -> None:
        self._order: OrderedDict[int, None] = OrderedDict()

    def add(self, block_id: int) -> None:
        self._order[block_id] = None
        self._order.move_to_end(block_id)

    def remove(self, block_id: int) -> None:
        self._order.pop(block_id, None)

    def pop_victims(self, n: int) -> list[int]:
        return [self._order.popitem(last=False)[0] for _ in range(n)]

    def reset(self, block_id: int) -> None:
        """A block id now holds new content: LRU keeps nothing per content."""

    def observe(self, block_tables: torch.Tensor, block_mass: torch.Tensor) -> None:
        """LRU ignores attention statistics."""

    def cached_ids(self) -> list[int]:
        return list(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._order


class AttentionEviction(LRUEviction):
    """``alpha * activity + (1 - alpha) * recency``; activity is an exact sliding-window sum of attention mass.

    Each observed decode step is kept as (step, block ids, mass) for ``window`` steps and subtracted when it leaves
    the window, so the cost per step is proportional to the blocks that step touched, not to the pool.  A block id
    that gets new content (``reset``) forgets the mass its previous content received.
    """

    wants_attention = True

    def __init__(self, num_blocks: int, alpha: float = 0.5, window: int = 1000) -> None:
        super().__init__()
        self.alpha = alpha
        self.window = window
        self._activity = np.zeros(num_blocks, dtype=np.float64)
        self._born = np.zeros(num_blocks, dtype=np.int64)  # step at which each block id got its current content
        self._released = np.zeros(num_blocks, dtype=np.int64)  # release tick, for recency
        self._steps: deque[tuple[int, np.ndarray, np.ndarray]] = deque()
        self._step = 0
        self._tick = 0

    def add(self, block_id: int) -> None:
        super().add(block_id)
        self._tick += 1
        self._released[block_id] = self._tick

    def reset(self, block_id: int) -> None:
        self._activity[block_id] = 0.0
        self._born[block_id] = self._step + 1

    def observe(self, block_tables: torch.Tensor, block_mass: torch.Tensor) -> None:
        """Add one decode step's per-table-entry mass ``[B, max_blocks]`` to the blocks those entries name."""
        self._step += 1
        mass = block_mass.detach().cpu().numpy().ravel()
        keep = mass > 0
        ids = block_tables.detach().cpu().numpy().ravel()[keep]
        mass = mass[keep]
        np.add.at(self._activity, ids, mass)
        self._steps.append((self._step, ids, mass))
        while len(self._steps) > self.window:
            step, old_ids, old_mass = self._steps.popleft()
            same = self._born[old_ids] <= step  # not reassigned since: that mass still belongs to this content
            np.add.at(self._activity, old_ids[same], -old_mass[same])

    def priorities(self, ids: np.ndarray) -> np.ndarray:
        """Scores of cached blocks ``ids`` (lower = evicted sooner).  Both terms are ranks scaled to [0, 1] over
        ``ids``: attention mass is heavy-tailed (the first block of a prompt soaks up most of it), so scaling by the
        maximum would flatten every other block to ~0, while ranks keep "read a little" above "never read"."""
        activity = self._activity[ids]
        activity = np.where(activity > 1e-9, activity, 0.0)  # what is left of subtracted windows is no activity
        return self.alpha * _rank(activity) + (1.0 - self.alpha) * _rank(self._released[ids])

    def pop_victims(self, n: int) -> list[int]:
        if n <= 0:
            return []
        ids = np.fromiter(self._order, dtype=np.int64, count=len(self._order))
        # stable sort: among equal scores, the earlier-released block goes first (LRU order)
        victims = ids[np.argsort(self.priorities(ids), kind="stable")[:n]].tolist()
        for block_id in victims:
            del self._order[block_id]
        return victims


def _rank(values: np.ndarray) -> np.ndarray:
    """Dense ranks scaled to [0, 1]: equal values share a rank, the smallest is 0, the largest 1."""
    distinct, rank = np.unique(values, return_inverse=True)
    return rank / (len(distinct) - 1) if len(distinct) > 1 else np.zeros(len(values))


def make_policy(name: str, num_blocks: int, alpha: float, window: int) -> EvictionPolicy:
    if name == "lru":
        return LRUEviction()
    if name == "attention":
        return AttentionEviction(num_blocks, alpha, window)
    raise ValueError(f"eviction_policy must be attention or lru, got {name!r}")
