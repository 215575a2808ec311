"""The newest camera frame a task node has seen, with its detections computed once, when first asked for, and
its images to send a model that reads them.

Frames come from the robot's camera (`camera_topic`, sensor_msgs/Image, or CompressedImage when the topic ends in
/compressed; sensor-data QoS), each made the same observation the inference node makes of it (its content hash, a
compressed frame's bytes' hash, names it), and from `observation_topic`. With `send_images` false a model that
reads images is asked about the frame by id only (a remote inference node subscribes the same camera topic). An observation
without images (camera_sim's scene text, which names its Image by id and sends no pixels) never replaces a frame
that has them: the pixels stay what the detector and a model that reads images see. Positions are read from the pixels with the OpenCV detector only with
``use_sim``: it is tuned to camera_sim's coloured shapes, and on a real camera its "obstacles" and "targets" would be
noise steering a real robot (there the base's own safety layer, e.g. nav2's costmaps, stops it). A frame out of
``bounds`` (an id too long to ask about, too many images or state values, an image too large) is ignored; an image
that cannot be decoded has no detections.
"""

import math
import threading
import time
from functools import partial

from rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes.compressed import compressed_id, compressed_to_rgb, is_compressed
from oxygen_ros.nodes.convert import check_observation, checked_pixels, image_to_rgb, rgb_to_image
from oxygen_ros.nodes.declare import Table
from oxygen_ros.nodes.stamps import capture_ns, nanoseconds, time_ns
from oxygen_ros.observations import content_id
from oxygen_ros.perception.detect import Detections, detect

PARAMETERS: Table = {
    "camera_topic": ("camera/image_raw", "sensor_msgs/Image input (sensor-data QoS): the robot's camera"),
    "observation_topic": ("oxygen/observation", "oxygen_ros/Observation input: scene text (camera_sim's), or frames"),
    "use_sim": (False, "frames are camera_sim's: trust the OpenCV detector (tuned to its scene) for positions"),
    "send_images": (True, "a model that reads images gets the newest frame's pixels inline with each request; false: "
                    "the frame by id only, which the inference node has from the same camera topic (a remote "
                    "inference node: each frame crosses the network once, not once per request)"),
}


class LatestFrame:
    def __init__(self, node: Node, settings: dict, group: CallbackGroup) -> None:
        self._logger, self._clock = node.get_logger(), node.get_clock()
        self._use_sim, self._send_images = settings["use_sim"], settings["send_images"]
        self._lock = threading.Lock()
        self._msg: ObservationMsg | None = None
        self._received = -math.inf
        self._detected: tuple[str, Detections | None] = ("", None)
        node.create_subscription(ObservationMsg, settings["observation_topic"], self._on_observation, 1,
                                 callback_group=group)  # fmt: skip
        camera = settings["camera_topic"]
        kind, on_frame = (CompressedImage, self._on_compressed) if is_compressed(camera) else (Image, self._on_image)
        # frames one at a time, in order: an older frame handled last would replace the newest, dated by its arrival
        node.create_subscription(kind, camera, on_frame, qos_profile_sensor_data,
                                 callback_group=MutuallyExclusiveCallbackGroup())  # fmt: skip

    def _on_image(self, msg: Image) -> None:
        """A camera frame as an observation named by its content hash, as the inference node names it."""
        try:
            observation_id = content_id("", [image_to_rgb(msg)], [])
        except EngineError as exc:
            self._logger.warning(f"ignoring a camera frame: {exc.message}", throttle_duration_sec=5.0)
            return
        self._store(ObservationMsg(header=msg.header, observation_id=observation_id, images=[msg]))

    def _on_compressed(self, msg: CompressedImage) -> None:
        """A compressed camera frame, named by its bytes as the inference node names it (``compressed``), decoded
        once here only when something reads its pixels (the detector with ``use_sim``, a model with
        ``send_images``): a remote inference node asked by id decodes its own copy."""
        try:
            observation_id = compressed_id(msg)
            pixels = [rgb_to_image(compressed_to_rgb(msg), msg.header)] if self._use_sim or self._send_images else []
        except EngineError as exc:
            self._logger.warning(f"ignoring a compressed camera frame: {exc.message}", throttle_duration_sec=5.0)
            return
        self._store(ObservationMsg(header=msg.header, observation_id=observation_id, images=pixels))

    def _on_observation(self, msg: ObservationMsg) -> None:
        try:
            check_observation(msg)
            _check_sizes(msg.images)
        except EngineError as exc:
            self._logger.warning(f"ignoring an observation: {exc.message}", throttle_duration_sec=5.0)
            return
        self._store(msg)

    def _store(self, msg: ObservationMsg) -> None:
        """Keep ``msg``, checked (a camera frame was as it was made one), as the newest frame, dated no later than it
        arrived (``capture_ns``: a camera clock running ahead would make a frozen frame look fresh)."""
        arrival_ns = self._clock.now().nanoseconds
        warn = partial(self._logger.warning, throttle_duration_sec=5.0)
        msg.header = Header(stamp=time_ns(capture_ns(nanoseconds(msg.header.stamp), arrival_ns, warn)),
                            frame_id=msg.header.frame_id)  # fmt: skip
        with self._lock:
            if msg.images or self._msg is None or not self._msg.images:
                self._msg, self._received = msg, time.monotonic()

    def age(self) -> float:
        """Seconds since the newest frame arrived (inf before the first)."""
        with self._lock:
            return time.monotonic() - self._received

    def observation_id(self) -> str:
        with self._lock:
            return self._msg.observation_id if self._msg else ""

    def inline(self, max_images: int) -> list[ObservationMsg]:
        """The newest frame's first ``max_images`` images as an inline observation ([] without a frame, images, or
        ``max_images``, or with ``send_images`` false: then the model is asked about the frame by id). No scene
        text and no id: the model reads the pixels, and the inference node names them
        by their content hash, as it names the same frame's camera image."""
        with self._lock:
            msg = self._msg
        if msg is None or not msg.images or max_images < 1 or not self._send_images:
            return []
        return [ObservationMsg(header=msg.header, images=list(msg.images[:max_images]))]

    def detections(self) -> Detections | None:
        """The newest frame's detections; None without ``use_sim``, before the first frame, or when it carries no
        image (text only) or one the detector cannot read."""
        with self._lock:
            msg, (seen_id, seen) = self._msg, self._detected
        if not self._use_sim or msg is None or not msg.images:
            return None
        if msg.observation_id == seen_id and seen_id:
            return seen
        try:
            found = detect(image_to_rgb(msg.images[0]))
        except EngineError:
            found = None
        with self._lock:
            self._detected = (msg.observation_id, found)
        return found


def _check_sizes(images: list[Image]) -> None:
    """OUT_OF_RANGE for an image too large (it would go on inline with every request that reads images, each one
    refused); a malformed one is kept, and the inference node names what is wrong with it in each answer."""
    for image in images:
        try:
            checked_pixels(image)
        except EngineError as exc:
            if exc.code == ErrorCode.OUT_OF_RANGE:
                raise
