"""The task nodes' newest frame when pixels and scene text arrive apart (camera_sim sends each frame once, as an
Image, and its text in an Observation naming it): text never replaces a frame that has pixels, so the detector and
an image-reading model keep seeing the newest pixels; without any pixels, text-only observations are the frame."""

import math
import time

import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes.latest_frame import PARAMETERS, LatestFrame
from oxygen_ros.nodes.obstacle_sources import DetectorSource
from oxygen_ros.nodes.stamps import nanoseconds, time_ns
from oxygen_ros.observations import content_id


def test_scene_text_never_replaces_the_pixels(ros_context):
    node = Node("latest_frame_test", context=ros_context)
    try:
        settings = {name: default for name, (default, _) in PARAMETERS.items()} | {"use_sim": True}
        frame = LatestFrame(node, settings, ReentrantCallbackGroup())
        frame._on_observation(ObservationMsg(observation_id="text-only", text="a table"))
        assert frame.observation_id() == "text-only" and frame.inline(1) == []  # no pixels yet: the text is it
        rgb = np.zeros((48, 64, 3), np.uint8)
        frame._on_image(rgb_to_image(rgb, Header(frame_id="camera_optical_frame")))
        image_id = content_id("", [rgb], [])
        for text_id in (image_id, "another-frame"):  # its own text, or a late one about another frame
            frame._on_observation(ObservationMsg(observation_id=text_id, text="a table"))
            assert frame.observation_id() == image_id and len(frame.inline(1)[0].images) == 1
        assert frame.detections() is not None
    finally:
        node.destroy_node()


def test_an_observation_with_an_image_too_large_is_ignored(ros_context):
    """Its images would go on inline with every request that reads images, each one refused: it never becomes the
    newest frame (the frame before it stays)."""
    node = Node("latest_frame_bounds_test", context=ros_context)
    try:
        settings = {name: default for name, (default, _) in PARAMETERS.items()}
        frame = LatestFrame(node, settings, ReentrantCallbackGroup())
        good = rgb_to_image(np.zeros((48, 64, 3), np.uint8), Header())
        frame._on_observation(ObservationMsg(observation_id="good", images=[good]))
        huge = Image(height=9000, width=9000, encoding="rgb8", step=27000, data=b"")  # over IMAGE_SIDE, no pixels
        wide = Image(height=1, width=8192, encoding="rgb8", step=8192 * 3 * 4000, data=b"")  # step x height too
        for bad in (huge, wide):
            frame._on_observation(ObservationMsg(observation_id="bad", images=[good, bad]))
            assert frame.observation_id() == "good"
        # a malformed one is kept: the inference node names what is wrong with it in the answers (test_vlm_tasks)
        short = Image(height=48, width=64, encoding="rgb8", step=192, data=b"\x00" * 100)
        frame._on_observation(ObservationMsg(observation_id="malformed", images=[short]))
        assert frame.observation_id() == "malformed"
    finally:
        node.destroy_node()


def test_the_sim_detector_is_stale_until_it_reads_a_frame(ros_context):
    """Navigation's camera detector (simulation): a frame it cannot read (scene text, no pixels) is no reading, so
    the source is stale and the base stops, rather than a clear view to drive into."""
    node = Node("detector_source_test", context=ros_context)
    try:
        settings = {name: default for name, (default, _) in PARAMETERS.items()} | {"use_sim": True}
        frame = LatestFrame(node, settings, ReentrantCallbackGroup())
        source = DetectorSource(frame)
        assert source.age(0) == math.inf  # nothing yet
        frame._on_observation(ObservationMsg(observation_id="text-only", text="a table"))
        assert source.age(0) == math.inf and source.blocking(0.2, 0.25, None, 0.0).touching
        frame._on_image(rgb_to_image(np.zeros((48, 64, 3), np.uint8), Header(frame_id="camera_optical_frame")))
        assert source.age(0) < 1.0 and source.blocking(0.2, 0.25, None, 0.0) is None  # a plain, empty scene
        time.sleep(0.2)  # its gaps are the frame's: the motion since (the navigation node's top speed counts it)
        age = source.age(0)
        assert source.unshifted_s() == age >= 0.2
    finally:
        node.destroy_node()


def test_a_frame_is_dated_no_later_than_it_arrived(ros_context):
    """A camera on a clock running ahead (another machine's) would make a frozen frame look fresh for as long as its
    clock leads: its stamp is bounded by its arrival; a stamp from the past is kept as it is."""
    node = Node("latest_frame_stamp_test", context=ros_context)
    clock = node.get_clock()
    try:
        settings = {name: default for name, (default, _) in PARAMETERS.items()}
        frame = LatestFrame(node, settings, ReentrantCallbackGroup())
        rgb = np.zeros((48, 64, 3), np.uint8)
        for offset_ns in (900_000_000, -2_000_000_000):
            stamp_ns = clock.now().nanoseconds + offset_ns
            image = rgb_to_image(rgb, Header(stamp=time_ns(stamp_ns), frame_id="camera_optical_frame"))
            as_observation = lambda m: frame._on_observation(ObservationMsg(header=m.header, images=[m]))  # noqa: E731
            for deliver in (frame._on_image, as_observation):
                before = clock.now().nanoseconds
                deliver(image)
                dated = nanoseconds(frame.inline(1)[0].header.stamp)
                assert before <= dated <= clock.now().nanoseconds if offset_ns > 0 else dated == stamp_ns
                assert nanoseconds(frame.inline(1)[0].images[0].header.stamp) == stamp_ns  # the image's own header
    finally:
        node.destroy_node()
