"""`camera_sim` through real rclpy (needs the installed package: `make install`, then `.venv/bin/pytest`): each tick
publishes an rgb8 Image and an Observation naming that frame (same header, its content hash as id) with the
describer's text and no pixels, so a frame crosses the wire once; /cmd_vel drives the simulated robot, which the
frames, /odom (in odom) and /tf follow; the TF tree is the one it simulates (map -> odom -> base_link, map ->
camera_link -> camera_optical_frame over the room's centre, looking down); a bad source makes `main` exit 1 with
the reason instead of spinning."""

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
from oxygen_ros.nodes.tf.backend import Transforms
from oxygen_ros.nodes.tf.tree import TransformUnavailable
from oxygen_ros.nodes.spin import EXIT_ON_REFUSAL


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
    stamps = {(image.header.stamp.sec, image.header.stamp.nanosec) for image in images}
    for obs in matched:
        frame = image_ids[obs.observation_id]
        assert obs.images == [] and (obs.header.stamp.sec, obs.header.stamp.nanosec) in stamps  # names, not copies
        assert obs.text and obs.text == describe(frame).text
        assert obs.header.frame_id == "camera_optical_frame"  # REP 103: z forward, x right, y down
    assert len({obs.observation_id for obs in observations}) == len(observations)  # the obstacle moves: new frames


def test_bad_source_exits_with_the_reason(ros_domain_id, capfd):
    assert main([EXIT_ON_REFUSAL, "--ros-args", "-p", "source:=webcam"]) == 1
    assert "unknown source 'webcam'" in capfd.readouterr().err
    assert main([EXIT_ON_REFUSAL, "--ros-args", "-p", "source:=video", "-p", "path:=/nonexistent/clip.mp4"]) == 1
    assert "/nonexistent/clip.mp4 does not exist" in capfd.readouterr().err


def test_cmd_vel_drives_the_simulated_robot_and_odom_follows_the_frames(ros_context):
    camera = CameraSim(context=ros_context, parameter_overrides=[Parameter("rate_hz", value=20.0)])
    driver = Node("camera_driver", context=ros_context)
    odom: list[Odometry] = []
    frames: list[Image] = []
    driver.create_subscription(Odometry, "/odom", odom.append, 10)
    driver.create_subscription(Image, "/camera/image_raw", frames.append, qos_profile_sensor_data)
    tf = Transforms(driver, tolerance_s=0.0)
    cmd_vel = driver.create_publisher(TwistStamped, "/cmd_vel", 10)  # what nav2 / diff_drive_controller send
    forward = TwistStamped()
    forward.header.frame_id = "base_link"
    forward.twist.linear.x = 0.3
    with spin_nodes(ros_context, camera, driver):
        wait_until(lambda: len(odom) >= 2, timeout=20.0, what="odometry")
        start = odom[-1]
        assert (start.header.frame_id, start.child_frame_id) == ("odom", "base_link")
        assert np.allclose([start.pose.pose.position.x, start.pose.pose.position.y], 0.0)  # odom: where it started
        wait_until(lambda: _known(tf, "map", "base_link"), timeout=10.0, what="the TF tree")
        start_in_map = tf.lookup("map", "base_link")[0]
        for _ in range(10):  # 1 s of commands at 10 Hz
            cmd_vel.publish(forward)
            time.sleep(0.1)
        time.sleep(CMD_TIMEOUT_S + 0.2)  # the watchdog stops the robot once commands stop
        moved, count = odom[-1], len(odom)
        time.sleep(0.3)
        assert len(odom) > count and odom[-1].pose == moved.pose, "no command, no motion"
        last_frame = frames[-1]
        stamp = moved.header.stamp.sec * 1_000_000_000 + moved.header.stamp.nanosec
        moved_in_map = tf.lookup("map", "base_link", stamp)[0].translation[:2]  # odom -> base_link follows /odom
        optical = tf.lookup("map", "camera_optical_frame")[0]

    def xy(msg: Odometry) -> np.ndarray:
        return np.array([msg.pose.pose.position.x, msg.pose.pose.position.y])

    yaw = 2 * math.atan2(start.pose.pose.orientation.z, start.pose.pose.orientation.w)
    travelled = xy(moved) - xy(start)
    assert 0.15 < np.linalg.norm(travelled) < 0.45  # ~0.3 m/s for ~1 s (frames are simulated time)
    assert np.allclose(travelled / np.linalg.norm(travelled), [math.cos(yaw), math.sin(yaw)], atol=0.02)
    assert abs(yaw) < 1e-9  # odom's axes are the start pose's: the robot drove along odom's x
    robot = describe(image_to_rgb(last_frame)).detections.robot
    assert np.linalg.norm(np.array([robot.pose.x_cm, robot.pose.y_cm]) / 100 - moved_in_map) < 0.03, "frames show it"
    on_map = np.array(moved_in_map) - start_in_map.translation[:2]  # the same drive, seen through map -> odom
    assert math.isclose(np.linalg.norm(on_map), np.linalg.norm(travelled), abs_tol=1e-6)
    assert np.allclose(on_map / np.linalg.norm(on_map), [math.cos(start_in_map.yaw), math.sin(start_in_map.yaw)])
    # the overhead camera: 3 m above the room's centre, optical z down, x east (image right), y south (image down)
    assert np.allclose(optical.translation, (1.6, 1.2, 3.0))
    assert np.allclose([optical.apply(axis) for axis in ((0, 0, 1), (1, 0, 0), (0, 1, 0))],
                       [(1.6, 1.2, 2.0), (2.6, 1.2, 3.0), (1.6, 0.2, 3.0)])  # fmt: skip


def _known(tf: Transforms, target: str, source: str) -> bool:
    try:
        tf.lookup(target, source)
        return True
    except TransformUnavailable:
        return False
