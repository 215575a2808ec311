"""The navigation node's obstacle sources: what its built-in driver may drive by.

A source is live while its newest message is younger than `input_timeout_s`; a stale or missing one stops the base
(as nav2's collision monitor does with its `source_timeout`). Three kinds:
- ``LaserScan`` on `scan_topic` (sensor-data QoS), any frame TF can bring into `base_frame`;
- a depth image on `depth_topic` (16UC1 millimetres or 32FC1 metres, REP 118) with its CameraInfo on
  `depth_info_topic`, points between `obstacle_min_height_m` and `obstacle_max_height_m` above the base (not the
  floor);
- in simulation only (``use_sim``), the camera detector on camera_sim's frames: tuned to its coloured scene, noise on
  a real camera.
Messages out of bounds (too many readings, an image over ``bounds``, non-finite geometry) are ignored with a
warning, so a source that sends only those goes stale and the base stops.
"""

import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, Image, LaserScan

from oxygen_ros.control import obstacles, unicycle
from oxygen_ros.control.obstacles import Blocking
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros import bounds
from oxygen_ros.nodes.image_rows import image_rows
from oxygen_ros.nodes.latest_frame import LatestFrame
from oxygen_ros.nodes.tf.backend import Transforms

# encoding: (pixel type, metres per unit), REP 118
DEPTH_ENCODINGS = {"16UC1": (np.dtype("u2"), 1e-3), "mono16": (np.dtype("u2"), 1e-3), "32FC1": (np.dtype("f4"), 1.0)}


class Source(Protocol):
    name: str  # what it is and where it comes from, as a refusal quotes it

    def age(self) -> float:
        """Seconds since its newest usable message (inf before the first)."""

    def blocking(self, radius_m: float, clearance_m: float) -> Blocking | None:
        """The obstacle that stops the robot now, if any; TransformUnavailable when its points cannot be placed."""


class _Latest:
    """The newest usable message of a subscription, with when it arrived."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._msg: Any = None
        self._received = -math.inf

    def keep(self, msg: Any) -> None:
        with self._lock:
            self._msg, self._received = msg, time.monotonic()

    def get(self) -> tuple[Any, float]:
        with self._lock:
            return self._msg, time.monotonic() - self._received


class _Points:
    """Obstacle points of one sensor, placed in the base frame by TF (the sensor's newest mount)."""

    def __init__(self, node: Node, name: str, transforms: Transforms, base_frame: str) -> None:
        self.name, self._transforms, self._base = name, transforms, base_frame
        self._logger = node.get_logger()
        self._latest = _Latest()

    def _take(self, msg: Any, check: Callable[[Any], None]) -> None:
        try:
            bounds.text(f"{self.name} frame_id", msg.header.frame_id, bounds.ID_CHARS)
            if not msg.header.frame_id:
                raise EngineError(ErrorCode.INVALID_ARGUMENT, "an empty frame_id: its points cannot be placed")
            check(msg)
        except EngineError as exc:
            self._logger.warning(f"ignoring a message of the {self.name}: {exc.message}", throttle_duration_sec=5.0)
            return
        self._latest.keep(msg)

    def age(self) -> float:
        return self._latest.get()[1]

    def _in_base(self, points: np.ndarray, frame: str) -> np.ndarray:
        mount = self._transforms.lookup(self._base, frame)[0]
        return obstacles.moved(points, mount.translation, mount.rotation)


class ScanSource(_Points):
    def __init__(self, node: Node, topic: str, transforms: Transforms, base_frame: str, group: CallbackGroup) -> None:
        super().__init__(node, f"LaserScan on {node.resolve_topic_name(topic)}", transforms, base_frame)
        node.create_subscription(LaserScan, topic, lambda msg: self._take(msg, _check_scan), qos_profile_sensor_data,
                                 callback_group=group)  # fmt: skip

    def blocking(self, radius_m: float, clearance_m: float) -> Blocking | None:
        msg, _ = self._latest.get()
        if msg is None:
            return None
        points = obstacles.scan_points(np.asarray(msg.ranges), msg.angle_min, msg.angle_increment, msg.range_min,
                                       msg.range_max)  # fmt: skip
        return obstacles.blocking(self._in_base(points, msg.header.frame_id), radius_m, clearance_m)


def _check_scan(msg: LaserScan) -> None:
    bounds.items("LaserScan ranges", msg.ranges, obstacles.MAX_SCAN_POINTS, "readings")
    for name in ("angle_min", "angle_increment", "range_min", "range_max"):
        bounds.finite(f"LaserScan {name}", getattr(msg, name))
    if not 0.0 <= msg.range_min <= msg.range_max:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"LaserScan range_min {msg.range_min} and range_max "
                          f"{msg.range_max} are no range")  # fmt: skip


class DepthSource(_Points):
    """Depth images and their CameraInfo (the newest info; its size must be the image's)."""

    def __init__(self, node: Node, topic: str, info_topic: str, heights: tuple[float, float], transforms: Transforms,
                 base_frame: str, group: CallbackGroup) -> None:  # fmt: skip
        super().__init__(node, f"depth image on {node.resolve_topic_name(topic)}", transforms, base_frame)
        self._heights = heights
        self._info = _Latest()
        node.create_subscription(Image, topic, lambda msg: self._take(msg, self._check_depth), qos_profile_sensor_data,
                                 callback_group=group)  # fmt: skip
        node.create_subscription(CameraInfo, info_topic, self._on_info, qos_profile_sensor_data, callback_group=group)

    def _on_info(self, msg: CameraInfo) -> None:
        fx, fy, cx, cy = msg.k[0], msg.k[4], msg.k[2], msg.k[5]
        if all(math.isfinite(v) for v in (fx, fy, cx, cy)) and fx > 0 and fy > 0:
            self._info.keep(msg)
        else:
            self._logger.warning(f"ignoring a CameraInfo of the {self.name}: no focal lengths in k",
                                 throttle_duration_sec=5.0)  # fmt: skip

    def _check_depth(self, msg: Image) -> None:
        if msg.encoding not in DEPTH_ENCODINGS:
            bounds.text("depth image encoding", msg.encoding, bounds.ID_CHARS)
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"depth encoding {msg.encoding!r} is not one of "
                              f"{', '.join(DEPTH_ENCODINGS)}")  # fmt: skip
        info, _ = self._info.get()
        if info is None or (info.width, info.height) != (msg.width, msg.height):
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"no CameraInfo of its size ({msg.width}x{msg.height})")
        image_rows(msg, DEPTH_ENCODINGS[msg.encoding][0].itemsize, ("metres copy", 4))  # every size within bounds

    def blocking(self, radius_m: float, clearance_m: float) -> Blocking | None:
        msg, _ = self._latest.get()
        info, _ = self._info.get()
        if msg is None or info is None:
            return None
        dtype, metres = DEPTH_ENCODINGS[msg.encoding]
        rows = image_rows(msg, dtype.itemsize)
        depth = rows.view(dtype.newbyteorder(">" if msg.is_bigendian else "<")).astype(np.float32) * metres
        points = obstacles.depth_points(depth, info.k[0], info.k[4], info.k[2], info.k[5])
        points = obstacles.within_heights(self._in_base(points, msg.header.frame_id), *self._heights)
        return obstacles.blocking(points, radius_m, clearance_m)


class DetectorSource:
    """camera_sim's frames through the OpenCV detector (simulation only): its own measure of the gap."""

    name = "camera detector (simulation)"

    def __init__(self, frame: LatestFrame) -> None:
        self._frame = frame

    def age(self) -> float:
        return self._frame.age()

    def blocking(self, radius_m: float, clearance_m: float) -> Blocking | None:
        detections = self._frame.detections()
        near = unicycle.blocking(detections.obstacles if detections else [], clearance_m * 100.0)
        return None if near is None else Blocking(near.clearance_cm / 100.0, near.ahead_cm / 100.0)


def configured(node: Node, settings: dict[str, Any], frame: LatestFrame, transforms: Transforms,
               group: CallbackGroup) -> list[Source]:  # fmt: skip
    """The sources the settings name (none when none is configured)."""
    sources: list[Source] = []
    base = settings["base_frame"]
    if settings["scan_topic"]:
        sources.append(ScanSource(node, settings["scan_topic"], transforms, base, group))
    if settings["depth_topic"]:
        info = settings["depth_info_topic"] or sibling(settings["depth_topic"], "camera_info")
        heights = (settings["obstacle_min_height_m"], settings["obstacle_max_height_m"])
        sources.append(DepthSource(node, settings["depth_topic"], info, heights, transforms, base, group))
    if settings["use_sim"]:
        sources.append(DetectorSource(frame))
    return sources


def sibling(topic: str, name: str) -> str:
    """``name`` in the namespace of ``topic`` (camera/depth/image_rect_raw -> camera/depth/camera_info), as
    image_transport pairs an image with its CameraInfo."""
    head, _, _ = topic.rpartition("/")
    return f"{head}/{name}" if head else name
