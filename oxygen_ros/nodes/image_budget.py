"""The bytes of images the inference node's requests in flight hold at once, bounded.

The requests in flight are bounded in number (``max_queue`` + ``max_num_seqs``), but each may carry an inline
observation of 3 images and a conversation of 8 more, each up to 64 MiB with an RGB copy as large once decoded: a
few hundred such requests would hold hundreds of GiB until they are answered. So each Infer request and Generate goal
reserves its inline images' bytes (the message's data and the RGB copy decoding makes, read from the fields before
anything is decoded) from ``inflight_image_bytes`` until it is answered; one that does not fit is refused
RESOURCE_EXHAUSTED naming the parameter, unless no other holds any (one larger than the whole budget still runs
alone). Observations named by id are the ring's, bounded by ``observation_ring_bytes``.
"""

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from sensor_msgs.msg import Image

from oxygen_ros import bounds
from oxygen_ros.errors import EngineError, ErrorCode


def inline_images(request: Any) -> Iterable[Image]:
    """An Infer request's or Generate goal's images carried in the message: its inline observation's and its
    conversation's."""
    for observation in request.observation:
        yield from observation.images
    for message in request.messages:
        yield from message.images


def image_bytes(images: Iterable[Image]) -> int:
    """What ``images`` hold once decoded: their data and each one's RGB copy (at most ``bounds.IMAGE_BYTES``: a larger
    one is refused before it is made)."""
    return sum(len(image.data) + min(image.width * image.height * 3, bounds.IMAGE_BYTES) for image in images)


class ImageBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, request: Any) -> Iterator[None]:
        """The request's inline images reserved while the block runs; EngineError RESOURCE_EXHAUSTED when they do not
        fit beside what the requests in flight hold."""
        amount = image_bytes(inline_images(request))
        with self._lock:
            if amount and self.held and self.held + amount > self.limit:  # (no images: nothing to refuse)
                raise EngineError(ErrorCode.RESOURCE_EXHAUSTED, f"the request's images take {amount} bytes and the "
                                  f"requests in flight hold {self.held} of inflight_image_bytes {self.limit}: "
                                  "retry when they are answered")  # fmt: skip
            self.held += amount
        try:
            yield
        finally:
            with self._lock:
                self.held -= amount
