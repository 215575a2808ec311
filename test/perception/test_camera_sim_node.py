"""`camera_sim` through real rclpy (needs the installed package: `make install`, then `.venv/bin/pytest`): each tick
publishes an rgb8 Image and an Observation about the same frame, whose id is the frame's content hash and whose
text is the describer's; a bad source makes `main` exit 1 with the reason instead of spinning."""

import numpy as np
from oxygen_ros.msg import Observation as ObservationMsg
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_harness import spin_nodes, wait_until
from sensor_msgs.msg import Image

from oxygen_ros.nodes.camera_sim import CameraSim, main
from oxygen_ros.nodes.convert import image_to_rgb
from oxygen_ros.observations import content_id
from oxygen_ros.perception.describe import describe


def test_publishes_images_and_observations_of_the_same_frames(ros_context):
    overrides = [
        Parameter("seed", value=3),
        Parameter("rate_hz", value=20.0),
        Parameter("width", value=320),
        Parameter("height", value=240),
    ]
    camera = CameraSim(context=ros_context, parameter_overrides=overrides)
    listener = Node("camera_listener", context=ros_context)
    images: list[Image] = []
    observations: list[ObservationMsg] = []
    listener.create_subscription(Image, "/camera/image_raw", images.append, qos_profile_sensor_data)
    listener.create_subscription(ObservationMsg, "/oxygen/observation", observations.append, 10)
    with spin_nodes(ros_context, camera, listener):
        wait_until(lambda: len(images) >= 3 and len(observations) >= 3, timeout=20.0, what="3 images and observations")

    image_ids = {}
    for image in images:
        assert (image.encoding, image.width, image.height, image.header.frame_id) == ("rgb8", 320, 240, "camera")
        rgb = image_to_rgb(image)
        image_ids[content_id("", [rgb], [])] = rgb
    matched = [obs for obs in observations if obs.observation_id in image_ids]
    assert len(matched) >= 2  # best-effort images may drop one, but the streams describe the same frames
    for obs in matched:
        frame = image_ids[obs.observation_id]
        (attached,) = obs.images
        assert np.array_equal(image_to_rgb(attached), frame)
        assert obs.text and obs.text == describe(frame).text
        assert obs.header.frame_id == "camera"
    assert len({obs.observation_id for obs in observations}) == len(observations)  # the obstacle moves: new frames


def test_bad_source_exits_with_the_reason(ros_domain_id, capfd):
    assert main(["--ros-args", "-p", "source:=webcam"]) == 1
    assert "unknown source 'webcam'" in capfd.readouterr().err
    assert main(["--ros-args", "-p", "source:=video", "-p", "path:=/nonexistent/clip.mp4"]) == 1
    assert "/nonexistent/clip.mp4 does not exist" in capfd.readouterr().err
