"""`camera_sim`: a camera for a fresh machine. Publishes frames from the simulator, a video file or an image folder
on `/camera/image_raw` (sensor_msgs/Image rgb8, sensor-data QoS) and, for each frame, an oxygen_ros/Observation on
`/oxygen/observation` carrying the frame and the scene describer's text (what SmolLM2 reads).

The observation_id is the content hash of the frame alone, the same id the inference node gives that frame when it
arrives on the camera topic, so both messages name one observation. All logic lives in ``oxygen_ros.perception``;
this node declares parameters, ticks a timer and moves results into messages.

With the simulator the loop is closed: the velocity command on `cmd_vel` (TwistStamped, or Twist) drives the simulated robot (so the frames
and their descriptions change as it moves; a command older than CMD_TIMEOUT_S stops it, like a real base's
watchdog) and each frame's true pose goes out as nav_msgs/Odometry on `odom`, in metres in the `map` frame (the
room: origin at its south-west corner, x east, y north; child frame `base_link`).
"""

from typing import Any

import math
import time

from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes import velocity
from oxygen_ros.nodes.declare import declare
from oxygen_ros.nodes.spin import run
from oxygen_ros.observations import content_id
from oxygen_ros.perception.describe import describe
from oxygen_ros.perception.scene import RobotPose
from oxygen_ros.perception.source import SOURCE_KINDS, SimSource, make_source

NODE_NAME = "camera_sim"
CMD_TIMEOUT_S = 0.5
MAP_FRAME, BASE_FRAME = "map", "base_link"
PARAMETERS: dict[str, tuple[Any, str]] = {
    "source": ("sim", f"where frames come from: {' | '.join(SOURCE_KINDS)}"),
    "path": ("", "video file (source video) or image folder (source folder)"),
    "seed": (0, "the simulated scene (source sim); the same seed gives the same frames"),
    "rate_hz": (10.0, "frames (and observations) published per second; a video is replayed at this rate"),
    "width": (640, "simulated frame width in pixels (video and folder frames keep their size)"),
    "height": (480, "simulated frame height in pixels"),
    "frame_id": ("camera_optical_frame", "header.frame_id of the images and observations (REP 103 optical frame)"),
    "camera_topic": ("camera/image_raw", "sensor_msgs/Image output (sensor-data QoS)"),
    "observation_topic": ("oxygen/observation", "oxygen_ros/Observation output"),
    "cmd_vel_topic": ("cmd_vel", "velocity command input driving the simulated robot (source sim)"),
    "cmd_vel_stamped": (True, "cmd_vel is geometry_msgs/TwistStamped; false = Twist (as navigation_node sends)"),
    "odom_topic": ("odom", "nav_msgs/Odometry output: the simulated robot's pose in the map frame (source sim)"),
}


class CameraSim(Node):
    """Raises ValueError / FileNotFoundError (saying which parameter or path is wrong) when it cannot start."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        value = declare(self, PARAMETERS)
        try:
            self._source = make_source(
                value["source"], value["path"], value["seed"], value["rate_hz"], value["width"], value["height"]
            )
        except (ValueError, FileNotFoundError):
            super().destroy_node()  # half-built: there is no source to close
            raise
        self._frame_id = value["frame_id"]
        self._images = self.create_publisher(Image, value["camera_topic"], qos_profile_sensor_data)
        self._observations = self.create_publisher(ObservationMsg, value["observation_topic"], 10)
        self._odometry = None
        self._command_time = -math.inf
        if isinstance(self._source, SimSource):
            self._odometry = self.create_publisher(Odometry, value["odom_topic"], 10)
            kind = velocity.command_type(value["cmd_vel_stamped"])
            self.create_subscription(kind, value["cmd_vel_topic"], self._on_cmd_vel, 10)
        self.create_timer(1.0 / value["rate_hz"], self._tick)

    def _on_cmd_vel(self, msg: velocity.Command) -> None:
        twist = velocity.twist_of(msg)
        self._source.command = (twist.linear.x * 100.0, twist.angular.z)
        self._command_time = time.monotonic()

    def _tick(self) -> None:
        if self._odometry and time.monotonic() - self._command_time > CMD_TIMEOUT_S:
            self._source.command = (0.0, 0.0)
        _, rgb = self._source.next_frame()
        header = Header(stamp=self.get_clock().now().to_msg(), frame_id=self._frame_id)
        image = rgb_to_image(rgb, header)
        text = describe(rgb).text
        self._images.publish(image)
        self._observations.publish(
            ObservationMsg(header=header, observation_id=content_id("", [rgb], []), images=[image], text=text)
        )
        if self._odometry:
            self._odometry.publish(odometry(self._source.scene.robot, self._source.command, header))

    def destroy_node(self) -> None:
        self._source.close()
        super().destroy_node()


def odometry(pose: RobotPose, command: tuple[float, float], header: Header) -> Odometry:
    """The simulated pose (cm, radians) and the command it is driving with (cm/s, rad/s) in ROS units."""
    msg = Odometry(child_frame_id=BASE_FRAME)
    msg.header.stamp, msg.header.frame_id = header.stamp, MAP_FRAME
    msg.pose.pose.position.x, msg.pose.pose.position.y = pose.x_cm / 100.0, pose.y_cm / 100.0
    msg.pose.pose.orientation.z = math.sin(pose.yaw_rad / 2)
    msg.pose.pose.orientation.w = math.cos(pose.yaw_rad / 2)
    msg.twist.twist.linear.x, msg.twist.twist.angular.z = command[0] / 100.0, command[1]
    return msg


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros camera_sim [--ros-args -p source:=video -p path:=clip.mp4]`."""
    return run(CameraSim, SingleThreadedExecutor, NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
