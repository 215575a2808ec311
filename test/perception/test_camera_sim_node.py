"""`camera_sim` through real rclpy (needs the installed package: `make install`, then `.venv/bin/pytest`): each tick
publishes an rgb8 Image and an Observation about the same frame, whose id is the frame's content hash and whose
text is the describer's; /cmd_vel drives the simulated robot, which the frames and /odom follow; a bad source
makes `main` exit 1 with the reason instead of spinning."""

import math
import time

import numpy as np
from geometry_msgs.msg import TwistStamped
from nav_msgs.msg import Odometry
from oxygen_ros.msg import Observation as ObservationMsg
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_harness import spin_nodes, wait_until
from sensor_msgs.msg import Image

from oxygen_ros.nodes.camera_sim import CMD_TIMEOUT_S, CameraSim, main
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
        assert (image.encoding, image.width, image.height, image.header.frame_id) == ("rgb8", 320, 240, "camera_optical_frame")
        rgb = image_to_rgb(image)
        image_ids[content_id("", [rgb], [])] = rgb
    matched = [obs for obs in observations if obs.observation_id in image_ids]
    assert len(matched) >= 2  # best-effort images may drop one, but the streams describe the same frames
    for obs in matched:
        frame = image_ids[obs.observation_id]
        (attached,) = obs.images
        assert np.array_equal(image_to_rgb(attached), frame)
        assert obs.text and obs.text == describe(frame).text
        assert obs.header.frame_id == "camera_optical_frame"  # REP 103: z forward, x right, y down
    assert len({obs.observation_id for obs in observations}) == len(observations)  # the obstacle moves: new frames


def test_bad_source_exits_with_the_reason(ros_domain_id, capfd):
    assert main(["--ros-args", "-p", "source:=webcam"]) == 1
    assert "unknown source 'webcam'" in capfd.readouterr().err
    assert main(["--ros-args", "-p", "source:=video", "-p", "path:=/nonexistent/clip.mp4"]) == 1
    assert "/nonexistent/clip.mp4 does not exist" in capfd.readouterr().err


def test_cmd_vel_drives_the_simulated_robot_and_odom_follows_the_frames(ros_context):
    camera = CameraSim(context=ros_context, parameter_overrides=[Parameter("rate_hz", value=20.0)])
    driver = Node("camera_driver", context=ros_context)
    odom: list[Odometry] = []
    observations: list[ObservationMsg] = []
    driver.create_subscription(Odometry, "/odom", odom.append, 10)
    driver.create_subscription(ObservationMsg, "/oxygen/observation", observations.append, 10)
    cmd_vel = driver.create_publisher(TwistStamped, "/cmd_vel", 10)  # what nav2 / diff_drive_controller send
    forward = TwistStamped()
    forward.header.frame_id = "base_link"
    forward.twist.linear.x = 0.3
    with spin_nodes(ros_context, camera, driver):
        wait_until(lambda: len(odom) >= 2, timeout=20.0, what="odometry")
        start = odom[-1]
        assert (start.header.frame_id, start.child_frame_id) == ("map", "base_link")
        for _ in range(10):  # 1 s of commands at 10 Hz
            cmd_vel.publish(forward)
            time.sleep(0.1)
        time.sleep(CMD_TIMEOUT_S + 0.2)  # the watchdog stops the robot once commands stop
        moved, count = odom[-1], len(odom)
        time.sleep(0.3)
        assert len(odom) > count and odom[-1].pose == moved.pose, "no command, no motion"
        last_frame = observations[-1]

    def xy(msg: Odometry) -> np.ndarray:
        return np.array([msg.pose.pose.position.x, msg.pose.pose.position.y])

    yaw = 2 * math.atan2(start.pose.pose.orientation.z, start.pose.pose.orientation.w)
    travelled = xy(moved) - xy(start)
    assert 0.15 < np.linalg.norm(travelled) < 0.45  # ~0.3 m/s for ~1 s (frames are simulated time)
    assert np.allclose(travelled / np.linalg.norm(travelled), [math.cos(yaw), math.sin(yaw)], atol=0.02)
    robot = describe(image_to_rgb(last_frame.images[0])).detections.robot
    assert np.linalg.norm(np.array([robot.pose.x_cm, robot.pose.y_cm]) / 100 - xy(moved)) < 0.03, "frames show it"
