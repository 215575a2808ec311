"""Recent observations, addressable by id, for requests that say which frame they are about (no ROS here).

Ids are content hashes unless the sender chose one: the same frame seen twice gets the same id, so requests about it
share one prefix in the KV pool. A frame that could not be decoded is remembered as rejected, so a request about it
(or about the latest frame, when that is the bad one) is told why instead of silently using an older frame.
"""

import hashlib
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from oxygen_ros.engine.io import Observation
from oxygen_ros import bounds
from oxygen_ros.errors import EngineError, ErrorCode

ENTRY_BYTES = 1024  # what an entry costs besides its payload (dict slot, dataclasses, id), so tiny ones count too
FLOAT_BYTES = 32  # a state value: a Python float and its list slot


def content_id(text: str, images: Sequence[np.ndarray], state: Sequence[float], image_keys: Sequence[str] = ()) -> str:
    """'obs-' + 16 hex digits of a hash over text, image shapes and pixels, state (as float32) and the images' camera
    keys when there are any (the same pixels from another camera are another observation)."""
    digest = hashlib.sha256()
    digest.update(text.encode())
    if image_keys:
        digest.update(("keys|" + "|".join(image_keys)).encode())
    for image in images:
        digest.update(repr(image.shape).encode())
        digest.update(np.ascontiguousarray(image).tobytes())
    digest.update(np.asarray(state, dtype=np.float32).tobytes())
    return f"obs-{digest.hexdigest()[:16]}"


@dataclass(frozen=True)
class Rejected:
    observation_id: str
    reason: str
    code: ErrorCode = ErrorCode.INVALID_ARGUMENT  # what a request about it is answered


@dataclass(frozen=True)
class _Kept:
    entry: Observation | Rejected
    arrived: float  # clock seconds
    nbytes: int


class ObservationRing:
    """Recent observations (or rejections); thread-safe. One stays addressable while it is among the last
    ``capacity`` or younger than ``keep_s``, whatever the frame rate, as long as all fit in ``max_bytes``: past that
    the oldest go first (those beyond the last ``capacity``, then the oldest of those), never the newest one.

    ``''`` means the latest one, and when a scene describer runs, the latest one it described: a frame's camera Image
    arrives a moment before its text, and a text-only model asked about that bare frame would see no scene at all."""

    def __init__(
        self,
        capacity: int,
        keep_s: float = 0.0,
        max_bytes: int = bounds.OBSERVATION_RING_BYTES,
        clock: Callable[[], float] = time.monotonic,
        camera_sets: bool = False,
    ) -> None:
        """``camera_sets``: a policy reads only keyed camera sets from the start (else once the first one came)."""
        if capacity < 1:
            raise ValueError(f"the observation ring needs room for at least one observation, got {capacity}")
        self.capacity, self.keep_s, self.max_bytes = capacity, keep_s, max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, _Kept] = OrderedDict()  # oldest arrival first
        self._bytes = 0
        self._camera_sets = camera_sets  # a policy reads only keyed camera sets (observation_node's): told, or one came
        self._lock = threading.Lock()

    def add(self, entry: Observation | Rejected) -> bool:
        """Store as the latest; True if its id was not in the ring (a new frame, worth prefilling).

        The same frame arrives twice, as a camera Image and as an Observation carrying the describer's text, in
        either order: the two are merged so neither loses what the other brought."""
        with self._lock:
            now = self._clock()
            old = self._entries.pop(entry.observation_id, None)
            if old is not None:
                self._bytes -= old.nbytes
                if isinstance(old.entry, Observation) and isinstance(entry, Observation):
                    entry = _merge(old.entry, entry)
            self._camera_sets |= isinstance(entry, Observation) and bool(entry.image_keys)
            kept = _Kept(entry, now, _footprint(entry))
            self._entries[entry.observation_id] = kept
            self._bytes += kept.nbytes
            self._evict(now)
            return old is None

    def _evict(self, now: float) -> None:
        """Drop from the oldest while it is beyond the count and older than keep_s, or the ring is over its bytes."""
        while len(self._entries) > 1:
            oldest = next(iter(self._entries.values()))
            expired = len(self._entries) > self.capacity and now - oldest.arrived >= self.keep_s
            if not (expired or self._bytes > self.max_bytes):
                return
            self._entries.popitem(last=False)
            self._bytes -= oldest.nbytes

    def get(self, observation_id: str, needs_images: bool = False) -> Observation | None:
        """The observation, None when ``''`` is asked before anything arrived; EngineError NOT_FOUND for an id not
        (or no longer) in the ring, the rejection's code (INVALID_ARGUMENT, OUT_OF_RANGE) for a rejected one.

        ``needs_images`` (a VLA's request): ``''`` is the latest frame that has its camera images, since a frame's
        describer text may arrive before its Image and a policy cannot act on text; once the robot sent a keyed
        camera set (observation_node's), the latest such set: a raw frame is one camera, the policy would run with
        the others masked (FAILED_PRECONDITION when none is kept: observation_node holds the sets back while a
        camera is silent)."""
        with self._lock:
            if not observation_id:
                newest_first = (kept.entry for kept in reversed(self._entries.values()))
                entry = next(newest_first, None)
                if entry is None:
                    return None
                sets = self._camera_sets
                wanted = (lambda e: e.images and (e.image_keys or not sets)) if needs_images else (lambda e: e.text)
                if isinstance(entry, Observation) and not wanted(entry):
                    fitting = (e for e in newest_first if isinstance(e, Observation) and wanted(e))
                    found = next(fitting, None)
                    if found is None and needs_images and sets:
                        raise EngineError(ErrorCode.FAILED_PRECONDITION, f"no camera set (an Observation with "
                                          f"image_keys) among the {len(self._entries)} observations kept: "
                                          "observation_node holds them back while a camera is silent, and a policy "
                                          "does not act on one raw camera frame")  # fmt: skip
                    entry = found or entry
            else:
                kept = self._entries.get(observation_id)
                if kept is None:
                    latest = next(reversed(self._entries), None)
                    raise EngineError(
                        ErrorCode.NOT_FOUND,
                        f"no observation {observation_id!r} among the {len(self._entries)} kept (ring size "
                        f"{self.capacity}, and those of the last {self.keep_s:g} s within {self.max_bytes} bytes; "
                        f"latest {latest!r})",
                    )
                entry = kept.entry
        if isinstance(entry, Rejected):
            raise EngineError(entry.code, f"observation {entry.observation_id!r} was rejected: {entry.reason}")
        return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def count_with_images(self) -> int:
        """Kept frames that have their camera images (what a VLA's ``''`` can be)."""
        with self._lock:
            return sum(isinstance(k.entry, Observation) and bool(k.entry.images) for k in self._entries.values())


def _footprint(entry: Observation | Rejected) -> int:
    if isinstance(entry, Rejected):
        return ENTRY_BYTES + sys.getsizeof(entry.reason)
    images = sum(image.nbytes for image in entry.images)
    return ENTRY_BYTES + sys.getsizeof(entry.text) + images + FLOAT_BYTES * len(entry.state)


def _merge(old: Observation, new: Observation) -> Observation:
    """One observation from two messages about the same frame: each field from whichever has it."""
    return Observation(
        observation_id=new.observation_id,
        text=new.text or old.text,
        images=new.images or old.images,
        state=new.state or old.state,
        image_keys=new.image_keys if new.images else old.image_keys,
        stamp_ns=new.stamp_ns or old.stamp_ns,
    )
