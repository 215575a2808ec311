"""The best DRAM read bandwidth this process sees: the bound a memory-bound decode step is measured against.

A batch-1 decode step reads every weight once, so weights bytes / bandwidth is the fastest it can be.  The bandwidth
is the fastest of several full sums over a tensor far larger than the caches, with torch's threads (what the engine
gets): a read the cores cannot do faster than the memory delivers.
"""

import time

import torch

PROBE_BYTES = 1 << 30


def read_bandwidth(repeats: int = 7, nbytes: int = PROBE_BYTES) -> float:
    """Bytes per second of the fastest of ``repeats`` sums over ``nbytes`` of fp32."""
    data = torch.ones(nbytes // 4)
    data.sum()  # touch every page once
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return nbytes / best
