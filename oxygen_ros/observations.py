"""Recent observations, addressable by id, for requests that say which frame they are about (no ROS here).

Ids are content hashes unless the sender chose one: the same frame seen twice gets the same id, so requests about it
share one prefix in the KV pool. A frame that could not be decoded is remembered as rejected, so a request about it
(or about the latest frame, when that is the bad one) is told why instead of silently using an older frame.
"""

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from oxygen_ros.engine.io import Observation
from oxygen_ros.errors import EngineError, ErrorCode


def content_id(text: str, images: Sequence[np.ndarray], state: Sequence[float]) -> str:
    """'obs-' + 16 hex digits of a hash over text, image shapes and pixels, and state (as float32)."""
    digest = hashlib.sha256()
    digest.update(text.encode())
    for image in images:
        digest.update(repr(image.shape).encode())
        digest.update(np.ascontiguousarray(image).tobytes())
    digest.update(np.asarray(state, dtype=np.float32).tobytes())
    return f"obs-{digest.hexdigest()[:16]}"


@dataclass(frozen=True)
class Rejected:
    observation_id: str
    reason: str


class ObservationRing:
    """The last ``capacity`` observations (or rejections); thread-safe. ``''`` means the latest one, and when a scene
    describer runs, the latest one it described: a frame's camera Image arrives a moment before its text, and a
    text-only model asked about that bare frame would see no scene at all."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"the observation ring needs room for at least one observation, got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[str, Observation | Rejected] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, entry: Observation | Rejected) -> bool:
        """Store as the latest; True if its id was not in the ring (a new frame, worth prefilling).

        The same frame arrives twice, as a camera Image and as an Observation carrying the describer's text, in
        either order: the two are merged so neither loses what the other brought."""
        with self._lock:
            old = self._entries.get(entry.observation_id)
            new = old is None
            if isinstance(old, Observation) and isinstance(entry, Observation):
                entry = _merge(old, entry)
            self._entries[entry.observation_id] = entry
            self._entries.move_to_end(entry.observation_id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
            return new

    def get(self, observation_id: str) -> Observation | None:
        """The observation, None when ``''`` is asked before anything arrived; EngineError NOT_FOUND for an id not
        (or no longer) in the ring, INVALID_ARGUMENT for a rejected one."""
        with self._lock:
            if not observation_id:
                entry = next(reversed(self._entries.values()), None)
                if entry is None:
                    return None
                if isinstance(entry, Observation) and not entry.text:
                    described = (e for e in reversed(self._entries.values()) if isinstance(e, Observation) and e.text)
                    entry = next(described, entry)
            else:
                entry = self._entries.get(observation_id)
                if entry is None:
                    latest = next(reversed(self._entries), None)
                    raise EngineError(
                        ErrorCode.NOT_FOUND,
                        f"no observation {observation_id!r} among the last {len(self._entries)} kept "
                        f"(ring size {self.capacity}, latest {latest!r})",
                    )
        if isinstance(entry, Rejected):
            raise EngineError(
                ErrorCode.INVALID_ARGUMENT, f"observation {entry.observation_id!r} was rejected: {entry.reason}"
            )
        return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _merge(old: Observation, new: Observation) -> Observation:
    """One observation from two messages about the same frame: each field from whichever has it."""
    return Observation(
        observation_id=new.observation_id,
        text=new.text or old.text,
        images=new.images or old.images,
        state=new.state or old.state,
    )
