"""Observation-to-command latency of a running goal, p50 / p99 over its last chunks (bounded memory for a goal that
runs for hours)."""

from collections import deque

import numpy as np

KEPT = 4096  # latest chunks the percentiles cover


class Latency:
    def __init__(self) -> None:
        self._ms: deque[float] = deque(maxlen=KEPT)

    def add(self, seconds: float) -> None:
        self._ms.append(seconds * 1000.0)

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile in ms; 0 before any chunk."""
        return float(np.percentile(np.fromiter(self._ms, float), q)) if self._ms else 0.0
