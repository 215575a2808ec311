"""Swap or recompute a preempted request: the choice, made per request from costs measured while serving.

A preempted request gives its pool blocks back.  To resume it, the engine either recomputes its KV (one prefill of
the tokens it had computed, less the prefix-cache hits it still finds) or swaps: before its blocks go, the KV of the
blocks only it holds is copied to the L1 host tier (full blocks under their content hash, the partial last block
under a key of the request's own, see ``swap_key``) and is copied back at readmission.  Blocks other requests
still hold stay in the pool, so they cost neither.

Which is cheaper depends on the machine and the moment: a swap moves bytes over the host link (PCIe on a GPU, a
memcpy on a CPU), a recompute runs the model.  Both rates are measured online: every step that prefills feeds
tokens/s, every swap out or in feeds bytes/s (moving averages).  ``auto`` swaps when moving the bytes out and back
is expected to take less time than recomputing the tokens, and swaps once before bytes/s is known, to learn it.
Swapping needs a lossless L1 (``cpu_tier_format: pool``, or a quantized pool whose format L1 keeps): a resumed
request must answer token for token what it would have answered unpreempted.
"""

import hashlib
from dataclasses import dataclass

MODES = ("auto", "swap", "recompute")
_SMOOTHING = 0.3  # weight of the newest measurement in the moving averages


def swap_key(request_id: str) -> bytes:
    """The L1 key of a swapped request's partial last block: 32 bytes like a block hash, in its own namespace."""
    return hashlib.sha256(b"oxygen-swap\0" + request_id.encode()).digest()


@dataclass(frozen=True)
class SwapRecord:
    """What a swapped-out request left in L1: ``tokens`` computed tokens, of which the partial last block (if any)
    is under ``tail_key``; the full blocks are under their content hashes."""

    tokens: int
    tail_key: bytes | None


def _smooth(old: float, new: float) -> float:
    return new if old <= 0 else (1 - _SMOOTHING) * old + _SMOOTHING * new


class PreemptionCosts:
    """Online rates and the per-request choice; counts how each preemption went, for tests and benchmarks."""

    def __init__(self, mode: str, can_swap: bool) -> None:
        if mode not in MODES:
            raise ValueError(f"preemption_mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.can_swap = can_swap
        self.recompute_tokens_per_s = 0.0
        self.swap_bytes_per_s = 0.0
        self.swapped = 0  # preemptions that swapped
        self.recomputed = 0  # preemptions that left the KV to be recomputed

    def observe_compute(self, tokens: int, seconds: float) -> None:
        """A forward pass that prefilled ``tokens`` tokens (in all) took ``seconds``."""
        if tokens > 0 and seconds > 0:
            self.recompute_tokens_per_s = _smooth(self.recompute_tokens_per_s, tokens / seconds)

    def observe_swap(self, num_bytes: int, seconds: float) -> None:
        if num_bytes > 0 and seconds > 0:
            self.swap_bytes_per_s = _smooth(self.swap_bytes_per_s, num_bytes / seconds)

    def should_swap(self, swap_bytes: int, recompute_tokens: int) -> bool:
        """Swap a request whose swap moves ``swap_bytes`` each way and whose recompute costs ``recompute_tokens``?"""
        if not self.can_swap or self.mode == "recompute" or swap_bytes == 0:
            return False
        if self.mode == "swap":
            return True
        if self.swap_bytes_per_s <= 0:
            return True  # learn what a swap costs
        if self.recompute_tokens_per_s <= 0:
            return False
        return 2 * swap_bytes / self.swap_bytes_per_s < recompute_tokens / self.recompute_tokens_per_s
