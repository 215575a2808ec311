"""The navigation node's obstacle sources: what its built-in driver may drive by.

A source is live while its newest reading is younger than `input_timeout_s`, aged by the earlier of its stamp and its
arrival on the node's clock (a reading replayed late, or stamped late, is as old as it is; a zero stamp, "no time",
counts as its arrival); a stale, missing or blind one (a depth camera with almost no valid pixel, a scan with almost
no reading that tells anything: a covered window, a driver's error codes; a clock gone back dates nothing) stops the
base, as nav2's collision monitor stops for an invalid source (since Jazzy; Humble's only skips it). Readings are
placed in `base_frame` through TF and then moved by the robot's motion since their stamp (odometry history), so an
old reading still lands where the obstacle is now; the scan and depth sources remember points no later ray of
theirs reaches for `obstacle_memory_s` (``control.obstacle_memory``), or until the node's `clear_obstacle_memory`
service is called. Three kinds:
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
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, Image, LaserScan

from oxygen_ros import bounds
from oxygen_ros.control import obstacles, unicycle
from oxygen_ros.control.obstacle_memory import ObstacleMemory
from oxygen_ros.control.obstacles import Blocking
from oxygen_ros.control.unicycle import Pose2D
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes.image_rows import image_rows
from oxygen_ros.nodes.latest_frame import LatestFrame
from oxygen_ros.nodes.odometry_history import Odom
from oxygen_ros.nodes.tf.backend import Transforms
from oxygen_ros.nodes.stamps import nanoseconds, reading_age
from oxygen_ros.nodes.tf.tree import TransformUnavailable
from oxygen_ros.perception.detect import Detections

# encoding: (pixel type, metres per unit), REP 118
DEPTH_ENCODINGS = {"16UC1": (np.dtype("u2"), 1e-3), "mono16": (np.dtype("u2"), 1e-3), "32FC1": (np.dtype("f4"), 1.0)}
MAX_TOO_CLOSE_SHARE = 0.25  # a depth image with more of its pixels too close to measure sees something against it
MIN_VALID_SHARE = 0.05  # a depth image or scan with fewer valid readings than this share is blind (covered), not clear
ANGLE_TOLERANCE = 1e-3  # rad: a scan's last bearing may miss its angle_max by one increment (drivers differ) and this
MAX_FIELD_OF_VIEW = math.radians(170.0)  # a depth camera's CameraInfo wider than this is a wrong focal length
REACH_TOLERANCE_M = 0.05  # a ray that stops this short of a remembered point still reached it (range noise), metres
MEMORY_MARGIN_M = 1.0  # remembered points farther than the corridor's length plus this are forgotten, metres


class Odometry(Protocol):
    """Where the robot was when a reading was taken, and where it is now (``OdometryHistory``)."""

    epoch: int  # bumped when its history restarts (time went back, the pose jumped)

    def pose_at(self, stamp_ns: int) -> Pose2D:
        """TransformUnavailable when no odometry reaches back to ``stamp_ns``."""

    def latest(self) -> Odom | None: ...


class Source(Protocol):
    name: str  # what it is and where it comes from, as a refusal quotes it

    def age(self, now_ns: int) -> float:
        """Seconds since its newest usable reading (inf before the first)."""

    def blocking(self, radius_m: float, clearance_m: float, odometry: Odometry, memory_s: float) -> Blocking | None:
        """The obstacle that stops the robot now, if any, of its newest reading and what it remembers for up to
        ``memory_s``; TransformUnavailable when its points cannot be placed."""

    def unshifted_s(self) -> float:
        """Seconds of the robot's motion its obstacles are not moved by (0: placed by odometry, whose own age the
        node counts)."""

    def forget(self) -> int:
        """Forget the obstacle points it remembers that its newest reading did not see; how many."""


# points [N, 3] in a reading's sensor frame -> whether its rays reached each (``obstacles.scan_reaches``)
Rays = Callable[[np.ndarray], np.ndarray]


class Reading(NamedTuple):
    """A usable reading: its points and rays in the sensor's frame, the frame, its stamp and arrival (node clock,
    ns)."""

    points: np.ndarray
    rays: Rays
    frame_id: str
    stamp_ns: int
    arrival_ns: int


class _Points:
    """Obstacle points of one sensor, placed in the base frame by TF (the sensor's mount at their stamp, within
    transform_tolerance_s) and by the robot's pose then (odometry history), kept in the odometry frame while no
    later reading's ray reaches them (``ObstacleMemory``), and so placed where they are now relative to the robot."""

    def __init__(self, node: Node, name: str, transforms: Transforms, base_frame: str) -> None:
        self.name, self._transforms, self._base = name, transforms, base_frame
        self._node = node
        # its messages one at a time, in order: two handled at once (a reentrant group) may finish out of order, and
        # an older reading replacing a newer looks like time going back to the memory, which then forgets everything
        self._in_order = MutuallyExclusiveCallbackGroup()
        self._lock = threading.Lock()
        self._reading: Reading | None = None
        self._memory = ObstacleMemory()  # replans only (one at a time)
        self._remembered: Reading | None = None  # the newest reading the memory took

    def _take(self, msg: Any, read: Callable[[Any], tuple[np.ndarray, Rays]]) -> None:
        """Keep ``msg``'s points and rays (``read``) unless it is out of bounds (a warning naming why)."""
        try:
            bounds.text(f"{self.name} frame_id", msg.header.frame_id, bounds.ID_CHARS)
            if not msg.header.frame_id:
                raise EngineError(ErrorCode.INVALID_ARGUMENT, "an empty frame_id: its points cannot be placed")
            points, rays = read(msg)
        except EngineError as exc:
            self._node.get_logger().warning(f"ignoring a message of the {self.name}: {exc.message}",
                                            throttle_duration_sec=5.0)  # fmt: skip
            return
        arrival = self._node.get_clock().now().nanoseconds
        reading = Reading(points, rays, msg.header.frame_id, nanoseconds(msg.header.stamp) or arrival, arrival)  # a zero stamp: "now" (as tf2)
        with self._lock:
            self._reading = reading

    def _latest(self) -> Reading | None:
        with self._lock:
            return self._reading

    def age(self, now_ns: int) -> float:
        reading = self._latest()
        if reading is None:
            return math.inf
        return reading_age(now_ns, reading.stamp_ns, reading.arrival_ns)

    def blocking(self, radius_m: float, clearance_m: float, odometry: Odometry, memory_s: float) -> Blocking | None:
        """The memory is in the odometry's frame: after the odometry restarted (its epoch) the newest reading is
        placed again, by the new history (TransformUnavailable, a stop, while that cannot reach back to it), so no
        point of the old frame is measured against a pose of the new; a restart during this call is one too."""
        epoch = odometry.epoch
        reading, latest = self._latest(), odometry.latest()
        if reading is None:
            return None
        if latest is None:
            raise TransformUnavailable("no odometry yet: a reading cannot be placed relative to the robot")
        if reading is not self._remembered or epoch != self._memory.epoch:
            self._remember(reading, odometry.pose_at(reading.stamp_ns), epoch, memory_s, radius_m + clearance_m)
        if odometry.epoch != epoch:
            raise TransformUnavailable("the odometry restarted while the readings were placed")
        pose = latest.pose
        return obstacles.blocking(self._memory.around((pose.x, pose.y, pose.yaw)), radius_m, clearance_m)

    def _remember(self, reading: Reading, pose: Pose2D, epoch: int, memory_s: float, corridor_m: float) -> None:
        """The reading's obstacle points into the memory, which forgets what its rays reached."""
        # the mount when the reading was taken: a sensor on a moving link (a pan-tilt head) whose TF stopped is not
        # placed by its last known pose (static mounts hold at any time)
        mount = self._transforms.lookup(self._base, reading.frame_id, reading.stamp_ns)[0]
        into_sensor = mount.inverse()
        seen = self._selected(obstacles.moved(reading.points, mount.translation, mount.rotation))
        self._memory.add(seen, (pose.x, pose.y, pose.yaw), reading.stamp_ns,
                         lambda local: reading.rays(obstacles.moved(local, into_sensor.translation,
                                                                    into_sensor.rotation)),
                         memory_s, corridor_m + MEMORY_MARGIN_M, epoch)  # fmt: skip
        self._remembered = reading

    def unshifted_s(self) -> float:
        return 0.0

    def forget(self) -> int:
        return self._memory.forget()

    def _selected(self, points: np.ndarray) -> np.ndarray:
        """The points in the base frame that count as obstacles (all of a scan's)."""
        return points


class ScanSource(_Points):
    def __init__(self, node: Node, topic: str, transforms: Transforms, base_frame: str) -> None:
        super().__init__(node, f"LaserScan on {node.resolve_topic_name(topic)}", transforms, base_frame)
        node.create_subscription(LaserScan, topic, lambda msg: self._take(msg, scan_reading), qos_profile_sensor_data,
                                 callback_group=self._in_order)  # fmt: skip


def scan_reading(msg: LaserScan) -> tuple[np.ndarray, Rays]:
    """The scan's points and rays (EngineError for one out of bounds or blind)."""
    points = _scan_points(msg)
    ranges = np.asarray(msg.ranges, dtype=np.float64)
    geometry = (msg.angle_min, msg.angle_increment, msg.range_min, msg.range_max)
    return points, lambda at: obstacles.scan_reaches(at, ranges, *geometry, REACH_TOLERANCE_M)


def _scan_points(msg: LaserScan) -> np.ndarray:
    bounds.items("LaserScan ranges", msg.ranges, obstacles.MAX_SCAN_POINTS, "readings")
    for name in ("angle_min", "angle_increment", "range_min", "range_max"):
        bounds.finite(f"LaserScan {name}", getattr(msg, name))
    if not 0.0 <= msg.range_min <= msg.range_max:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"LaserScan range_min {msg.range_min} and range_max "
                          f"{msg.range_max} are no range")  # fmt: skip
    ranges = np.asarray(msg.ranges, dtype=np.float64)
    # REP 117: a reading from range_min on, or +-inf, says something (a return; nothing in range; too close to
    # measure); NaN, or a finite reading under range_min (a driver's error code, a covered window), says nothing
    telling = np.count_nonzero(np.isinf(ranges) | (np.isfinite(ranges) & (ranges >= msg.range_min)))
    if not len(ranges) or telling < MIN_VALID_SHARE * len(ranges):
        raise EngineError(ErrorCode.FAILED_PRECONDITION, f"{telling} of its {len(ranges)} readings say anything "
                          "(REP 117): a blind scan (covered, or its driver failing)")  # fmt: skip
    last = msg.angle_min + msg.angle_increment * (len(ranges) - 1)  # bearings a driver in degrees would scatter
    # as bearings (modulo a turn): a scanner turning clockwise may end at -3 pi for its angle_max pi (sick_scan NAV310)
    if abs(math.remainder(last - msg.angle_max, 2 * math.pi)) > abs(msg.angle_increment) + ANGLE_TOLERANCE or \
            abs(msg.angle_increment) * (len(ranges) - 1) > 2 * math.pi + abs(msg.angle_increment):  # fmt: skip
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"LaserScan bearings: angle_min {msg.angle_min:.4f} + "
                          f"angle_increment {msg.angle_increment:.6f} x {len(ranges) - 1} = {last:.4f}, not its "
                          f"angle_max {msg.angle_max:.4f} (or over a full turn): its points cannot be placed")  # fmt: skip
    return obstacles.scan_points(ranges, msg.angle_min, msg.angle_increment, msg.range_min, msg.range_max)


class DepthSource(_Points):
    """Depth images and their CameraInfo (the newest info; its size must be the image's)."""

    def __init__(self, node: Node, topic: str, info_topic: str, heights: tuple[float, float], transforms: Transforms,
                 base_frame: str) -> None:  # fmt: skip
        super().__init__(node, f"depth image on {node.resolve_topic_name(topic)}", transforms, base_frame)
        self._heights = heights
        self._info: CameraInfo | None = None
        node.create_subscription(Image, topic, lambda msg: self._take(msg, self._depth_points),
                                 qos_profile_sensor_data, callback_group=self._in_order)  # fmt: skip
        node.create_subscription(CameraInfo, info_topic, self._on_info, qos_profile_sensor_data,
                                 callback_group=self._in_order)  # fmt: skip

    def _on_info(self, msg: CameraInfo) -> None:
        """The newest CameraInfo whose k places points: finite, its principal point on the image, its focal lengths
        giving a field of view under MAX_FIELD_OF_VIEW (a tiny one would throw every point aside: a clear view)."""
        fx, fy, cx, cy = msg.k[0], msg.k[4], msg.k[2], msg.k[5]
        widest = 2.0 * math.tan(MAX_FIELD_OF_VIEW / 2.0)  # image size / focal length at that field of view
        if all(math.isfinite(v) for v in (fx, fy, cx, cy)) and fx > 0 and fy > 0 and msg.width > 0 and \
                msg.height > 0 and 0 <= cx <= msg.width and 0 <= cy <= msg.height and \
                msg.width / fx <= widest and msg.height / fy <= widest:  # fmt: skip
            with self._lock:
                self._info = msg
        else:
            self._node.get_logger().warning(f"ignoring a CameraInfo of the {self.name}: its k (fx {fx}, fy {fy}, cx "
                                            f"{cx}, cy {cy}) cannot place the {msg.width}x{msg.height} image's points",
                                            throttle_duration_sec=5.0)  # fmt: skip

    def _depth_points(self, msg: Image) -> tuple[np.ndarray, Rays]:
        """The image's points in its optical frame, every few pixels (``obstacles.depth_stride``), and its rays (those
        pixels); EngineError for an unknown encoding, a size over ``bounds``, no CameraInfo of its size, a blind image, or one with something
        against the camera."""
        if msg.encoding not in DEPTH_ENCODINGS:
            bounds.text("depth image encoding", msg.encoding, bounds.ID_CHARS)
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"depth encoding {msg.encoding!r} is not one of "
                              f"{', '.join(DEPTH_ENCODINGS)}")  # fmt: skip
        with self._lock:
            info = self._info
        if info is None or (info.width, info.height) != (msg.width, msg.height):
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"no CameraInfo of its size ({msg.width}x{msg.height})")
        dtype, metres = DEPTH_ENCODINGS[msg.encoding]
        rows = image_rows(msg, dtype.itemsize)  # every size within bounds
        stride = obstacles.depth_stride(msg.height, msg.width)
        pixels = rows.view(dtype.newbyteorder(">" if msg.is_bigendian else "<"))[::stride, ::stride]
        depth = pixels.astype(np.float32) * metres
        # REP 117's -inf: something nearer than the camera measures. Over MAX_TOO_CLOSE_SHARE of the view it is
        # something against the camera (not a clear way); less, the floor or the robot's own body under the
        # camera's minimum range (a ZED's 0.3 m) is seen so: placed nowhere, as depth_image_proc's cloud drops it
        too_close = np.count_nonzero(depth == -np.inf)
        if too_close > MAX_TOO_CLOSE_SHARE * depth.size:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"{too_close / depth.size:.0%} of its pixels are too "
                              "close to measure (REP 117's -inf): something against the camera")  # fmt: skip
        if np.count_nonzero(np.isfinite(depth) & (depth > 0)) < MIN_VALID_SHARE * depth.size:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"fewer than {MIN_VALID_SHARE:.0%} of its pixels have "
                              "a depth: a blind image (covered, or facing the void)")  # fmt: skip
        k = info.k[0] / stride, info.k[4] / stride, info.k[2] / stride, info.k[5] / stride  # fx, fy, cx, cy
        return obstacles.depth_points(depth, *k, depth.size), \
            lambda at: obstacles.depth_reaches(at, depth, *k, REACH_TOLERANCE_M)  # fmt: skip

    def _selected(self, points: np.ndarray) -> np.ndarray:
        return obstacles.within_heights(points, *self._heights)


class DetectorSource:
    """camera_sim's frames through the OpenCV detector (simulation only): its own measure of the gap. A frame it
    cannot read (scene text without pixels, an image it cannot decode) is no reading: the source is stale until it
    reads one, so the base stops rather than take it for a clear view."""

    name = "camera detector (simulation)"

    def __init__(self, frame: LatestFrame) -> None:
        self._frame = frame
        self._judged: Detections | None = None  # the detections of the frame ``age`` dated, which ``blocking`` reads
        self._judged_age = 0.0  # that frame's age then, s

    def age(self, now_ns: int) -> float:
        self._judged = self._frame.detections()
        self._judged_age = self._frame.age() if self._judged is not None else math.inf
        return self._judged_age

    def unshifted_s(self) -> float:
        """The judged frame's age: its gaps are measured in the frame, not moved by the motion since (none judged:
        ``blocking`` lets nothing move)."""
        return self._judged_age if self._judged is not None else 0.0

    def forget(self) -> int:
        return 0  # it remembers nothing: each frame is judged alone

    def blocking(self, radius_m: float, clearance_m: float, odometry: Odometry, memory_s: float) -> Blocking | None:
        """Of the frame ``age`` found live (the navigation node asks it first, as for every source), so a frame the
        detector cannot read arriving in between cannot pass for a clear view; none judged: no way is clear."""
        judged = self._judged
        if judged is None:
            return Blocking(0.0, 0.0, touching=True)
        near = unicycle.blocking(judged.obstacles, clearance_m * 100.0)
        return None if near is None else Blocking(near.clearance_cm / 100.0, near.ahead_cm / 100.0)


def configured(node: Node, settings: dict[str, Any], frame: LatestFrame, transforms: Transforms) -> list[Source]:
    """The sources the settings name (none when none is configured)."""
    sources: list[Source] = []
    base = settings["base_frame"]
    if settings["scan_topic"]:
        sources.append(ScanSource(node, settings["scan_topic"], transforms, base))
    if settings["depth_topic"]:
        info = settings["depth_info_topic"] or sibling(settings["depth_topic"], "camera_info")
        heights = (settings["obstacle_min_height_m"], settings["obstacle_max_height_m"])
        sources.append(DepthSource(node, settings["depth_topic"], info, heights, transforms, base))
    if settings["use_sim"]:
        sources.append(DetectorSource(frame))
    return sources


def sibling(topic: str, name: str) -> str:
    """``name`` in the namespace of ``topic`` (camera/depth/image_rect_raw -> camera/depth/camera_info,
    /depth -> /camera_info), as image_transport pairs an image with its CameraInfo."""
    head, slash, _ = topic.rpartition("/")
    return f"{head}/{name}" if slash else name
