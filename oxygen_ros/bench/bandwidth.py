"""The best DRAM read bandwidth this process sees: the bound a memory-bound decode step is measured against.

A batch-1 decode step reads every weight once, so weights bytes / bandwidth is the fastest it can be.  The bandwidth
is the fastest of several full reads of a tensor far larger than the caches, with torch's threads (what the engine
gets), each read done two ways: torch's sum, and where the CPU kernels run our own streamed product over the same
bytes as rows (about as fast as the sum here, at times faster: a bound measured by a slower reader than the engine's
would be no bound).  A read cannot go faster than the memory delivers; this VM's memory does not always deliver the
same, so the peers suite probes more than once and keeps the best.
"""

import time
from collections.abc import Callable

import torch

from oxygen_ros.kernels.cpu_matvec import matvec_kernel

PROBE_BYTES = 1 << 30
PROBE_ROW = 1024  # floats a row when the streamed product reads the probe


def read_bandwidth(repeats: int = 7, nbytes: int = PROBE_BYTES) -> float:
    """Bytes per second of the fastest of ``repeats`` rounds of reads of ``nbytes`` of fp32."""
    data = torch.ones(nbytes // 4 // PROBE_ROW * PROBE_ROW)
    readers: list[Callable[[], torch.Tensor]] = [data.sum]
    matvec = matvec_kernel()
    if matvec is not None:
        rows, x = data.view(-1, PROBE_ROW), torch.ones(PROBE_ROW)
        readers.append(lambda: matvec(rows, x))
    for read in readers:
        read()  # touch every page once
    best = float("inf")
    for _ in range(repeats):
        for read in readers:
            start = time.perf_counter()
            read()
            best = min(best, time.perf_counter() - start)
    return data.numel() * 4 / best
