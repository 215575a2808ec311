"""The vision encoder's output for the latest few image sets, keyed by the images' content hashes.

The prefix cache keeps image tokens' K/V, but only in full blocks: the block where a frame's tokens end also holds
the question, so every new question about a frame still needs that frame's last image rows as input.  Keeping the
encoder's output for recent frames means a frame goes through the vision encoder once, however many tasks ask
about it (and two requests about one frame in the same batch share one pass).
"""

from collections import OrderedDict
from collections.abc import Callable

import torch


class ImageFeatureCache:
    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self.encoder_runs = 0  # passes through the vision encoder, for stats and tests
        self._entries: OrderedDict[bytes, torch.Tensor] = OrderedDict()

    def get(self, key: bytes, encode: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The features stored under ``key`` (the concatenated content hashes of a request's images), else
        ``encode()``'s, stored and the least recently used entry dropped beyond ``capacity``."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        features = encode()
        self.encoder_runs += 1
        self._entries[key] = features
        if len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return features
