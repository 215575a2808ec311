"""Approximate observation reuse (opt-in): a new frame that looks like a recent one is served from that one's KV.

A robot's camera at 10-30 Hz sends many nearly identical frames; every new frame is a new image hash, so an exact
prefix cache recomputes the whole image prefix (SigLIP and the backbone prefill) each time.  With
``reuse_similarity_threshold`` t > 0 the engine compares each observation's images with those of the last
``HISTORY`` observations it saw, by OpenCV's mean absolute difference of small grayscale thumbnails (in [0, 1] of
the full 0-255 range), and when every image differs from an earlier observation's by less than t, the request is
served as if that earlier observation had arrived: its images (so its image hashes and its cached KV), and, for a
text model, its scene text (the description of the frame it reuses).  The robot state is always the new one.  The
cost is staleness: what changed in the scene by less than t is not seen; ``bench --suite tiers`` measures it. And it
is bounded in time: where both are stamped, an observation stands in only for one captured at most ``MAX_AGE_NS``
after it (below the arm's input_timeout_s default, 0.5 s), so a still scene is computed anew a few times a second
instead of served from one frame for minutes while the answers report the newest frame's stamp.
"""

from collections import deque
from dataclasses import replace

import cv2
import numpy as np

from oxygen_ros.engine.io import Observation

HISTORY = 8  # recent observations a new one is compared with
THUMBNAIL = (64, 64)  # width, height: the comparison's resolution (noise and tiny shifts average out)
MAX_AGE_NS = 250_000_000  # capture time an earlier observation may stand in for (both stamped)


def thumbnail(rgb: np.ndarray) -> np.ndarray:
    """A small grayscale copy, the unit of comparison."""
    return cv2.resize(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), THUMBNAIL, interpolation=cv2.INTER_AREA)


def frame_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two thumbnails as a fraction of the full 0-255 range."""
    return float(cv2.absdiff(a, b).mean()) / 255.0


class SimilarFrames:
    """The last ``HISTORY`` observations with images, and the substitution of a new one by a similar one."""

    def __init__(self, threshold: float) -> None:
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"the similarity threshold must be in (0, 1), got {threshold}")
        self.threshold = threshold
        self._recent: deque[tuple[Observation, list[np.ndarray]]] = deque(maxlen=HISTORY)
        self.reused = 0  # observations served from an earlier one's images

    def resolve(self, obs: Observation) -> Observation:
        """``obs``, or the most similar recent observation's images, text and capture stamp with ``obs``'s state and
        id."""
        if not obs.images:
            return obs
        thumbs = [thumbnail(im) for im in obs.images]
        best, best_diff = None, self.threshold
        for earlier, earlier_thumbs in self._recent:
            if len(earlier_thumbs) != len(thumbs) or _too_old(earlier, obs):
                continue
            diff = max(frame_difference(a, b) for a, b in zip(thumbs, earlier_thumbs, strict=True))
            if diff < best_diff:
                best, best_diff = earlier, diff
        if best is None:
            self._recent.append((obs, thumbs))
            return obs
        self.reused += 1
        return replace(obs, images=best.images, image_keys=best.image_keys, text=best.text, stamp_ns=best.stamp_ns)


def _too_old(earlier: Observation, obs: Observation) -> bool:
    """Whether ``earlier`` was captured over MAX_AGE_NS before ``obs`` (unstamped: its age is unknown, not bounded)."""
    return bool(earlier.stamp_ns and obs.stamp_ns and obs.stamp_ns - earlier.stamp_ns > MAX_AGE_NS)
