"""A transform buffer without ROS: static and dynamic transforms by child frame, chained lookups, interpolation in
time. What tf2's BufferCore does for our nodes where tf2 is not installed, with its input rules: frame ids lose a
leading '/', a transform with an empty or self-referencing frame, a non-finite number, a translation over
MAX_TRANSLATION_M or a quaternion whose squared norm is off 1 by more than 0.01 is refused (a near-unit one is
normalised), and the buffer holds at most MAX_FRAMES frames and, per frame, CACHE_S seconds or MAX_SAMPLES samples
of history, so a flood of /tf messages cannot grow it without bound."""

import bisect
import math
import threading
from dataclasses import dataclass, field

from geometry_msgs.msg import TransformStamped

from oxygen_ros import bounds
from oxygen_ros.nodes.tf.rigid import Rigid, interpolate, of_transform, unit_rotation

CACHE_S = 10.0  # tf2's default cache time
MAX_FRAMES = 1024
MAX_SAMPLES = 4096  # per frame: 400 Hz over CACHE_S
MAX_TRANSLATION_M = 1e6
NS = 1_000_000_000


class TransformUnavailable(Exception):
    """No transform between two frames at the asked time; the message says why (unknown frame, not connected,
    extrapolation)."""


@dataclass
class _Edge:
    parent: str
    static: Rigid | None = None  # a static edge holds at every time
    stamps: list[int] = field(default_factory=list)  # a dynamic edge's samples, oldest first (nanoseconds)
    samples: list[Rigid] = field(default_factory=list)


def stamp_ns(msg: TransformStamped) -> int:
    return msg.header.stamp.sec * NS + msg.header.stamp.nanosec


class TransformTree:
    def __init__(self, tolerance_s: float = 0.0) -> None:
        """``tolerance_s``: a lookup at a time up to this far outside a frame's history takes its nearest sample."""
        self._tolerance_ns = int(tolerance_s * NS)
        self._edges: dict[str, _Edge] = {}
        self._lock = threading.Lock()

    def set(self, msg: TransformStamped, static: bool) -> None:
        """Add one transform; ValueError saying why it is refused."""
        parent, child = msg.header.frame_id.lstrip("/"), msg.child_frame_id.lstrip("/")
        for what, name in (("frame_id", parent), ("child_frame_id", child)):
            if not name or len(name) > bounds.ID_CHARS:
                raise ValueError(f"{what} {name[:bounds.PREVIEW_CHARS]!r} must have 1 to {bounds.ID_CHARS} characters")
        if parent == child:
            raise ValueError(f"frame {child!r} cannot be its own parent")
        rigid = of_transform(msg.transform)
        values = (*rigid.translation, *rigid.rotation)
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"transform {parent} -> {child} has a non-finite value: {values}")
        if math.dist(rigid.translation, (0.0, 0.0, 0.0)) > MAX_TRANSLATION_M:
            raise ValueError(f"transform {parent} -> {child} moves more than {MAX_TRANSLATION_M:g} m")
        rigid = unit_rotation(rigid, f"transform {parent} -> {child}")
        stamp = stamp_ns(msg)
        with self._lock:
            edge = self._edges.get(child)
            if edge is None and len(self._edges) >= MAX_FRAMES:
                raise ValueError(f"the buffer already holds {MAX_FRAMES} frames; {child!r} is one too many")
            if edge is None or edge.parent != parent or (edge.static is not None) != static:
                edge = self._edges[child] = _Edge(parent)  # a new parent or kind replaces the history
            if static:
                edge.static = rigid
                return
            at = bisect.bisect_right(edge.stamps, stamp)
            edge.stamps.insert(at, stamp)
            edge.samples.insert(at, rigid)
            keep = bisect.bisect_left(edge.stamps, edge.stamps[-1] - int(CACHE_S * NS))
            keep = max(keep, len(edge.stamps) - MAX_SAMPLES)
            del edge.stamps[:keep], edge.samples[:keep]

    def lookup(self, target: str, source: str, at_ns: int | None = None) -> tuple[Rigid, int]:
        """The transform from ``source`` to ``target`` coordinates and the time it holds at: at ``at_ns``, or at the
        latest time all dynamic frames between them share (None)."""
        target, source = target.lstrip("/"), source.lstrip("/")
        if target == source:  # as tf2: a frame's transform to itself is the identity, known or not
            return Rigid(), at_ns if at_ns is not None else 0
        with self._lock:
            up_source, up_target = self._ancestors(source), self._ancestors(target)
            common = next((frame for frame in up_source if frame in up_target), None)
            if common is None:
                raise TransformUnavailable(f"frames {target!r} and {source!r} are not connected")
            edges = [self._edges[f] for f in up_source[: up_source.index(common)]]
            back = [self._edges[f] for f in up_target[: up_target.index(common)]]
            dynamic = [edge for edge in edges + back if edge.static is None]
            when = at_ns if at_ns is not None else min((e.stamps[-1] for e in dynamic), default=0)
            to_common = Rigid()
            for edge in edges:
                to_common = self._at(edge, when, source, target) * to_common
            from_common = Rigid()
            for edge in back:
                from_common = self._at(edge, when, source, target) * from_common
        return from_common.inverse() * to_common, when

    def _ancestors(self, frame: str) -> list[str]:
        """``frame`` and its parents up to the root (the lock is held)."""
        if frame not in self._edges and not any(edge.parent == frame for edge in self._edges.values()):
            raise TransformUnavailable(f"frame {frame!r} does not exist")
        chain = [frame]
        while chain[-1] in self._edges:
            chain.append(self._edges[chain[-1]].parent)
            if len(chain) > len(self._edges) + 1:
                raise TransformUnavailable(f"the frames above {frame!r} form a loop")
        return chain

    def _at(self, edge: _Edge, when: int, source: str, target: str) -> Rigid:
        if edge.static is not None:
            return edge.static
        stamps = edge.stamps
        after = bisect.bisect_left(stamps, when)
        if after < len(stamps) and stamps[after] == when:
            return edge.samples[after]
        if 0 < after < len(stamps):
            fraction = (when - stamps[after - 1]) / (stamps[after] - stamps[after - 1])
            return interpolate(edge.samples[after - 1], edge.samples[after], fraction)
        nearest = 0 if after == 0 else len(stamps) - 1
        if abs(stamps[nearest] - when) <= self._tolerance_ns:
            return edge.samples[nearest]
        raise TransformUnavailable(
            f"{target} <- {source} at {when / NS:.3f} s would extrapolate: the {edge.parent} transform is known "
            f"from {stamps[0] / NS:.3f} to {stamps[-1] / NS:.3f} s (tolerance {self._tolerance_ns / NS:g} s)"
        )
