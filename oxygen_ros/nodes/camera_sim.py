"""`camera_sim`: a camera for a fresh machine. Publishes frames from the simulator, a video file or an image folder
on `camera/image_raw` (sensor_msgs/Image rgb8, sensor-data QoS) and, for each frame, an oxygen_ros/Observation on
`oxygen/observation` carrying the scene describer's text (what SmolLM2 reads) but not the frame: it names the frame
by the Image's header (same stamp and frame_id) and by its observation_id, the content hash of the frame, the id the
inference node and the task nodes give that Image when it arrives, so they join text and pixels by id and each frame
crosses the wire once. All logic lives in ``oxygen_ros.perception``; this node declares parameters, ticks a timer
and moves results into messages.

With the simulator the loop is closed: the velocity command on `cmd_vel` (TwistStamped, or Twist) drives the
simulated robot (so the frames and their descriptions change as it moves; a command older than CMD_TIMEOUT_S stops
it, like a real base's watchdog); each frame's true pose goes out as nav_msgs/Odometry on `odom` in the odom frame
(child base_link) and as the odom -> base_link transform on /tf, and the rest of the tree it simulates (map -> odom,
map -> camera_link -> camera_optical_frame: ``sim_frames``) on /tf_static; the robot's laser scan of the walking
obstacle (``perception.lidar``) goes out as sensor_msgs/LaserScan on `scan` in base_link, so the navigation node stops
on a scan as on a robot.
"""

from typing import Any

import math
import time

from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, LaserScan
from std_msgs.msg import Header

from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes import sim_frames, velocity
from oxygen_ros.nodes.declare import declare
from oxygen_ros.nodes.spin import run
from oxygen_ros.observations import content_id
from oxygen_ros.perception import lidar
from oxygen_ros.perception.describe import describe
from oxygen_ros.perception.source import SOURCE_KINDS, SimSource, make_source
from oxygen_ros.nodes.tf.backend import broadcasters

NODE_NAME = "camera_sim"
CMD_TIMEOUT_S = 0.5
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
    "odom_topic": ("odom", "nav_msgs/Odometry output: the simulated robot's pose in odom_frame (source sim)"),
    "scan_topic": ("scan", "sensor_msgs/LaserScan output (sensor-data QoS): the robot's laser in base_frame (source sim)"),
    "map_frame": ("map", "the simulated room's frame (REP 105 map; source sim)"),
    "odom_frame": ("odom", "odometry's frame: the robot's start pose in map_frame (source sim)"),
    "base_frame": ("base_link", "the simulated robot's frame (source sim)"),
    "camera_frame": ("camera_link", "the overhead camera's body frame; frame_id is its optical frame (source sim)"),
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
            self._frames = sim_frames.Frames(value["map_frame"], value["odom_frame"], value["base_frame"],
                                             value["camera_frame"], self._frame_id)  # fmt: skip
            self._start = self._source.scene.robot
            self._odometry = self.create_publisher(Odometry, value["odom_topic"], 10)
            self._scan = self.create_publisher(LaserScan, value["scan_topic"], qos_profile_sensor_data)
            self._tf, static_tf = broadcasters(self)
            static_tf.sendTransform(sim_frames.static_transforms(self._start, self._frames, self.get_clock().now().to_msg()))
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
        t, rgb = self._source.next_frame()
        header = Header(stamp=self.get_clock().now().to_msg(), frame_id=self._frame_id)
        image = rgb_to_image(rgb, header)
        text = describe(rgb).text
        self._images.publish(image)
        self._observations.publish(ObservationMsg(header=header, observation_id=content_id("", [rgb], []), text=text))
        if self._odometry:
            odom = sim_frames.odometry(self._start, self._source.scene.robot, self._source.command, self._frames,
                                       header.stamp)  # fmt: skip
            self._odometry.publish(odom)
            self._tf.sendTransform(sim_frames.base_transform(odom))
            self._scan.publish(self._laser_scan(t, Header(stamp=header.stamp, frame_id=self._frames.base)))

    def _laser_scan(self, t: float, header: Header) -> LaserScan:
        scan = LaserScan(header=header, angle_min=lidar.ANGLE_MIN, angle_increment=lidar.ANGLE_INCREMENT,
                         range_min=lidar.RANGE_MIN_M, range_max=lidar.RANGE_MAX_M, scan_time=self._source.period)  # fmt: skip
        scan.angle_max = lidar.ANGLE_MIN + lidar.ANGLE_INCREMENT * (lidar.RAYS - 1)
        scan.ranges = lidar.scan_ranges(self._source.scene, t).tolist()
        return scan

    def destroy_node(self) -> None:
        self._source.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros camera_sim [--ros-args -p source:=video -p path:=clip.mp4]`."""
    return run(CameraSim, SingleThreadedExecutor, NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
