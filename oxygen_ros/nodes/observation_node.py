"""`observation_node`: a robot's cameras and joint state as one oxygen_ros/Observation per moment, so a VLA checkpoint
with several cameras (and a state) reads frames taken together, and each frame is decoded and hashed once in the graph,
here, not again in every task node.

* In: one image topic per camera key (`camera_topics`, `key=topic`; a topic ending in `/compressed` is
  sensor_msgs/CompressedImage, decoded with OpenCV, else sensor_msgs/Image), sensor-data QoS; the arm's
  sensor_msgs/JointState on `state_topic`.
* Pairing: message_filters' approximate-time rule (``perception.frame_sync``): one frame per camera whose stamps lie
  less than `sync_slop_s` apart make a set; `max_rate_hz` thins the sets.
* Out: each set as ONE Observation on `observation_topic`: its images (rgb8, rotated and resized as `rotate` and
  `resize` ask, each keeping its camera's header) in `camera_topics` order with `image_keys`, the newest positions of
  `state_joint_names` in that order, header.stamp = the set's oldest stamp (what its age is: a frame up to `sync_slop_s`
  older than its partners is no younger for them), each frame's no later than it arrived here (a camera clock running
  ahead dates nothing into the future), header.frame_id = the first camera's, and
  observation_id = the content hash of what it carries (``observations.content_id``), the id the inference node keeps.

Stale or missing inputs are named, never defaulted: a camera silent for longer than `input_timeout_s` is a throttled
warning naming its key, topic and age, and no observation goes out without it (its partners' frames older than that
are dropped from the queues); a joint with no position, or one older than `input_timeout_s`, is a throttled warning
naming the joint, and the observations go without state (the instruction node's own state check then refuses motion).
Every number from outside is bounded before it sizes anything: list parameters and their entries, image sizes
(``convert`` / ``bounds``, and a compressed image's header before it is decoded), JointState lengths. A bad parameter
stops the node with a ValueError naming it.
"""

import functools
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    InvalidTopicNameException,
    ParameterUninitializedException,
)
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Header

from oxygen_ros import bounds
from oxygen_ros.errors import EngineError
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.nodes.compressed import compressed_to_rgb, is_compressed
from oxygen_ros.nodes.convert import image_to_rgb, rgb_to_image
from oxygen_ros.control.arm.state_entries import reported_velocities, state_entries
from oxygen_ros.nodes.declare import declare
from oxygen_ros.nodes.spin import run
from oxygen_ros.nodes.stamps import capture_ns, nanoseconds, time_ns
from oxygen_ros.observations import content_id
from oxygen_ros.perception.frame_sync import FrameSync, RateGate, Stamped

NODE_NAME = "observation_node"
NS = 1_000_000_000
SIDE = (16, 4096)  # a `resize` width or height, pixels
ROTATIONS = {0: None, 90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}
WARN_EVERY_S = 5.0  # one warning per subject (a camera, a joint) this often at most
WATCH_S = 1.0  # the silent-camera check runs at least this often
PARAMETERS: dict[str, tuple[Any, str]] = {
    "state_topic": ("joint_states", "sensor_msgs/JointState input: the positions of state_joint_names"),
    "sync_slop_s": (0.05, "one frame per camera makes a set when their stamps lie less than this apart, seconds (a set "
                    "is as old as its oldest frame: keep this well under the instruction node's input_timeout_s)"),
    "sync_queue_size": (10, "frames each camera keeps waiting for its partners (message_filters' queue_size)"),
    "input_timeout_s": (0.5, "a camera silent longer than this holds the observations back, a joint position older "
                        "than this leaves them without state (each a named warning), seconds"),  # fmt: skip
    "observation_topic": ("oxygen/observation", "oxygen_ros/Observation output"),
    "max_rate_hz": (10.0, "at most this many observations a second (the sets between are dropped)"),
}
RANGES = {"sync_slop_s": (0.0, 10.0), "sync_queue_size": (1, 100), "input_timeout_s": (0.0, 60.0),
          "max_rate_hz": (bounds.MIN_RATE_HZ, 1000.0)}  # fmt: skip
POSITIVE = ("sync_slop_s", "input_timeout_s", "max_rate_hz")
LISTS = {
    "camera_topics": f"key=topic per camera, in the order of the observation's images (at most {bounds.IMAGES}; "
    f"keys: the checkpoint's image keys); a topic ending in /compressed is sensor_msgs/CompressedImage",
    "resize": f"key=WxH: that camera's images resized to W x H pixels ({SIDE[0]}..{SIDE[1]}), after rotate; "
    "empty = as they come",
    "rotate": "key=90|180|270: that camera's images turned clockwise by that many degrees; empty = as they come",
    "state_joint_names": f"the state, in order (at most {bounds.STATE}): joints (their positions), or joint.pos / "
    "joint.vel (LeRobot's names); empty = observations without state",
}
SIZE = re.compile(r"(\d{1,5})x(\d{1,5})")


@dataclass(frozen=True)
class Camera:
    key: str
    topic: str
    rotate: int = 0  # degrees clockwise
    size: tuple[int, int] | None = None  # (width, height) after rotating; None = as it comes

    @property
    def compressed(self) -> bool:
        return is_compressed(self.topic)


@dataclass(frozen=True)
class Frame:
    """A camera message waiting for its partners, and when it arrived on the node clock."""

    msg: Image | CompressedImage
    arrival_ns: int


def _pairs(name: str, entries: list[str], bound: int) -> list[tuple[str, str]]:
    """``key=value`` entries split at the first '=', keys distinct; ValueError naming the parameter."""
    if len(entries) > bound:
        raise ValueError(f"parameter {name} has {len(entries)} entries, more than the bound of {bound}")
    out: list[tuple[str, str]] = []
    for entry in entries:
        key, _, value = entry.partition("=")
        if not (key and value) or len(entry) > 2 * bounds.ID_CHARS:
            raise ValueError(f"parameter {name}: {entry[: bounds.ID_CHARS]!r} is not key=value "
                             f"(at most {2 * bounds.ID_CHARS} characters)")  # fmt: skip
        if key in (k for k, _ in out):
            raise ValueError(f"parameter {name} names {key!r} twice")
        out.append((key, value))
    return out


def cameras(camera_topics: list[str], resize: list[str], rotate: list[str]) -> list[Camera]:
    """The cameras the three list parameters describe; ValueError naming the parameter and entry that is wrong."""
    topics = _pairs("camera_topics", camera_topics, bounds.IMAGES)
    if not topics:
        raise ValueError("parameter camera_topics is empty: at least one key=topic is needed")
    keys = [key for key, _ in topics]
    sizes: dict[str, tuple[int, int]] = {}
    for key, value in _pairs("resize", resize, bounds.IMAGES):
        match = SIZE.fullmatch(value)
        width, height = (int(match[1]), int(match[2])) if match else (0, 0)
        if not all(SIDE[0] <= side <= SIDE[1] for side in (width, height)):
            raise ValueError(f"parameter resize: {key}={value} is not WxH with sides in {SIDE[0]}..{SIDE[1]}")
        sizes[key] = (width, height)
    turns: dict[str, int] = {}
    for key, value in _pairs("rotate", rotate, bounds.IMAGES):
        if value not in {str(degrees) for degrees in ROTATIONS}:
            raise ValueError(f"parameter rotate: {key}={value} is not one of {', '.join(map(str, ROTATIONS))} degrees")
        turns[key] = int(value)
    for name, table in (("resize", sizes), ("rotate", turns)):
        unknown = set(table) - set(keys)
        if unknown:
            raise ValueError(f"parameter {name} names {', '.join(sorted(unknown))}, not a key of camera_topics {keys}")
    return [Camera(key, topic, turns.get(key, 0), sizes.get(key)) for key, topic in topics]


def joint_names(names: list[str]) -> tuple[str, ...]:
    valid = all(0 < len(name) <= bounds.ID_CHARS for name in names) and len(set(names)) == len(names)
    if len(names) > bounds.STATE or not valid:
        raise ValueError(f"parameter state_joint_names must be distinct non-empty names of at most {bounds.ID_CHARS} "
                         f"characters (at most {bounds.STATE}), got {len(names)}")  # fmt: skip
    return tuple(names)


def frame_rgb(msg: Image | CompressedImage, camera: Camera) -> np.ndarray:
    """The frame as the observation carries it: decoded to RGB, turned, then resized."""
    rgb = compressed_to_rgb(msg) if isinstance(msg, CompressedImage) else image_to_rgb(msg)
    if ROTATIONS[camera.rotate] is not None:
        rgb = cv2.rotate(rgb, ROTATIONS[camera.rotate])
    if camera.size is not None and camera.size != (rgb.shape[1], rgb.shape[0]):
        shrink = camera.size[0] * camera.size[1] < rgb.shape[0] * rgb.shape[1]
        rgb = cv2.resize(rgb, camera.size, interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    return np.ascontiguousarray(rgb)


def _string_lists(node: Node) -> dict[str, list[str]]:
    """Declare the string-array parameters (no default: an empty array is not a YAML default) and read them."""
    out: dict[str, list[str]] = {}
    for name, description in LISTS.items():
        try:
            node.declare_parameter(name, Parameter.Type.STRING_ARRAY,
                                   ParameterDescriptor(description=description, read_only=True))  # fmt: skip
            out[name] = list(node.get_parameter(name).value)
        except ParameterUninitializedException:
            out[name] = []
        except (InvalidParameterTypeException, InvalidParameterValueException) as exc:
            raise ValueError(f"parameter {name} must be a list of strings: {exc}") from exc
    return out


class ObservationNode(Node):
    """Raises ValueError naming a bad parameter when it cannot start."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        value = declare(self, PARAMETERS, POSITIVE, RANGES, read_only=PARAMETERS)
        self._timeout_ns = round(value["input_timeout_s"] * NS)
        self._gate = RateGate(value["max_rate_hz"])
        self._joints: dict[str, tuple[float, float, int]] = {}  # joint -> (position, velocity (NaN: none), arrival on
        # the node clock, ns)
        self._warned: dict[str, float] = {}  # subject -> monotonic time of its last warning
        self._started = self._now_ns()
        try:
            lists = _string_lists(self)
            self._cameras = cameras(lists["camera_topics"], lists["resize"], lists["rotate"])
            self._state_entries = state_entries(joint_names(lists["state_joint_names"]))
            self._wanted = frozenset(entry.joint for entry in self._state_entries)
            self._sync: FrameSync[Frame] = FrameSync(len(self._cameras), value["sync_queue_size"],
                                                     value["sync_slop_s"], max(1.0, value["input_timeout_s"]))  # fmt: skip
            self._arrived: list[int | None] = [None] * len(self._cameras)  # each camera's last frame, node clock ns
            self._subscribe(value["state_topic"])
        except ValueError:
            Node.destroy_node(self)
            raise
        self._observations = self.create_publisher(ObservationMsg, value["observation_topic"], 10)
        self.create_timer(min(value["input_timeout_s"] / 2, WATCH_S), self._watch)

    def _subscribe(self, state_topic: str) -> None:
        """The inputs' subscriptions; ValueError naming a topic that is not a valid name."""
        self._topics: list[str] = []
        for index, camera in enumerate(self._cameras):
            kind = CompressedImage if camera.compressed else Image
            try:
                self.create_subscription(kind, camera.topic, functools.partial(self._on_frame, index),
                                         qos_profile_sensor_data)  # fmt: skip
            except (InvalidTopicNameException, ValueError) as exc:  # ValueError: an unknown {substitution}
                raise ValueError(f"parameter camera_topics: {camera.key}={camera.topic}: {exc}") from exc
            self._topics.append(self.resolve_topic_name(camera.topic))
        self._state_topic = ""
        if self._state_entries:
            try:
                self.create_subscription(JointState, state_topic, self._on_state, 10)
            except (InvalidTopicNameException, ValueError) as exc:
                raise ValueError(f"parameter state_topic: {exc}") from exc
            self._state_topic = self.resolve_topic_name(state_topic)

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _warn(self, subject: str, message: str) -> None:
        """Log ``message`` unless ``subject`` (a camera or joint and its problem) was warned about less than
        WARN_EVERY_S ago: rclpy's throttle is per call site, where one silent camera would hide another."""
        now = time.monotonic()
        if now - self._warned.get(subject, -math.inf) >= WARN_EVERY_S:
            self._warned[subject] = now
            self.get_logger().warning(message)

    def _fresh(self, now_ns: int) -> Callable[[Frame], bool]:
        return lambda frame: now_ns - frame.arrival_ns <= self._timeout_ns

    # --- inputs ------------------------------------------------------------------------------------------------------
    def _on_frame(self, index: int, msg: Image | CompressedImage) -> None:
        now = self._now_ns()
        self._arrived[index] = now
        self._sync.discard(self._fresh(now))  # a partner that arrived too long ago can no longer make a set
        frames = self._sync.add(index, nanoseconds(msg.header.stamp), Frame(msg, now))
        if frames is not None and self._gate.passes(now):
            self._publish(frames, now)

    def _on_state(self, msg: JointState) -> None:
        if len(msg.name) > bounds.STATE or len(msg.position) != len(msg.name):
            self._warn("state", f"ignoring a JointState on {self._state_topic} with {len(msg.name)} names and "
                       f"{len(msg.position)} positions")  # fmt: skip
            return
        arrival = self._now_ns()
        velocities = reported_velocities(len(msg.name), msg.velocity)
        for name, position, velocity in zip(msg.name, msg.position, velocities):
            if name in self._wanted and math.isfinite(position):
                self._joints[name] = (float(position), velocity, arrival)

    def _watch(self) -> None:
        """Name each camera silent for longer than input_timeout_s, and drop the frames waiting for it."""
        now = self._now_ns()
        for index, camera in enumerate(self._cameras):
            arrived = self._arrived[index]
            age_ns = now - (self._started if arrived is None else arrived)
            if age_ns > self._timeout_ns:
                what = "no frame yet" if arrived is None else "last frame"
                self._warn(f"camera {camera.key} {what}", f"camera {camera.key}: {what} on {self._topics[index]} "
                           f"{age_ns / NS:.2f} s ago, over input_timeout_s {self._timeout_ns / NS:g}: no observation "
                           "until it is back")  # fmt: skip
        self._sync.discard(self._fresh(now))

    # --- output ------------------------------------------------------------------------------------------------------
    def _state(self, now_ns: int) -> list[float]:
        """state_joint_names' positions and velocities in order, or [] (named in a warning) when one is missing or
        stale."""
        out = []
        for entry in self._state_entries:
            kept, name = self._joints.get(entry.joint), entry.joint
            if kept is None:
                kind, problem = "missing", f"no position on {self._state_topic} yet"
            elif now_ns - kept[2] > self._timeout_ns:
                kind, problem = "stale", f"its position is {(now_ns - kept[2]) / NS:.2f} s old, over input_timeout_s " \
                                         f"{self._timeout_ns / NS:g}"  # fmt: skip
            elif entry.velocity and math.isnan(kept[1]):
                kind, problem = "velocity", f"the joint states carry no velocity (state entry {entry.name})"
            else:
                out.append(kept[1] if entry.velocity else kept[0])
                continue
            self._warn(f"joint {name} {kind}", f"joint {name}: {problem}: observations go without state")
            return []
        return out

    def _publish(self, frames: list[Stamped[Frame]], now_ns: int) -> None:
        pixels = []
        for camera, topic, stamped in zip(self._cameras, self._topics, frames):
            try:
                pixels.append(frame_rgb(stamped.message.msg, camera))
            except EngineError as exc:
                self._warn(f"camera {camera.key} frame", f"camera {camera.key}: dropping a frame on {topic}: {exc.message}")
                return
        state = self._state(now_ns)
        warn = functools.partial(self._warn, "camera clock")
        captured = min(capture_ns(stamped.stamp_ns, stamped.message.arrival_ns, warn) for stamped in frames)
        header = Header(stamp=time_ns(captured), frame_id=frames[0].message.msg.header.frame_id)
        images = [rgb_to_image(rgb, stamped.message.msg.header) for rgb, stamped in zip(pixels, frames)]
        keys = [camera.key for camera in self._cameras]
        self._observations.publish(ObservationMsg(
            header=header, observation_id=content_id("", pixels, state, keys), images=images, image_keys=keys,
            state=state,
        ))  # fmt: skip


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros observation_node --ros-args -p camera_topics:="['observation.images.top=camera/image_raw']"`."""
    return run(ObservationNode, SingleThreadedExecutor, NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
