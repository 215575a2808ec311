"""`camera_sim`: a camera for a fresh machine. Publishes frames from the simulator, a video file or an image folder
on `/camera/image_raw` (sensor_msgs/Image rgb8, sensor-data QoS) and, for each frame, an oxygen_ros/Observation on
`/oxygen/observation` carrying the frame and the scene describer's text (what SmolLM2 reads).

The observation_id is the content hash of the frame alone, the same id the inference node gives that frame when it
arrives on the camera topic, so both messages name one observation. All logic lives in ``oxygen_ros.perception``;
this node declares parameters, ticks a timer and moves results into messages.
"""

from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes.spin import spin_until_shutdown
from oxygen_ros.observations import content_id
from oxygen_ros.perception.describe import describe
from oxygen_ros.perception.source import SOURCE_KINDS, make_source

NODE_NAME = "camera_sim"
PARAMETERS: dict[str, tuple[Any, str]] = {
    "source": ("sim", f"where frames come from: {' | '.join(SOURCE_KINDS)}"),
    "path": ("", "video file (source video) or image folder (source folder)"),
    "seed": (0, "the simulated scene (source sim); the same seed gives the same frames"),
    "rate_hz": (10.0, "frames (and observations) published per second; a video is replayed at this rate"),
    "width": (640, "simulated frame width in pixels (video and folder frames keep their size)"),
    "height": (480, "simulated frame height in pixels"),
    "frame_id": ("camera", "header.frame_id of the images and observations"),
    "camera_topic": ("/camera/image_raw", "sensor_msgs/Image output (sensor-data QoS)"),
    "observation_topic": ("/oxygen/observation", "oxygen_ros/Observation output"),
}


class CameraSim(Node):
    """Raises ValueError / FileNotFoundError (saying which parameter or path is wrong) when it cannot start."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        for name, (default, description) in PARAMETERS.items():
            self.declare_parameter(name, default, ParameterDescriptor(description=description))
        value = {name: self.get_parameter(name).value for name in PARAMETERS}
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
        self.create_timer(1.0 / value["rate_hz"], self._tick)

    def _tick(self) -> None:
        _, rgb = self._source.next_frame()
        header = Header(stamp=self.get_clock().now().to_msg(), frame_id=self._frame_id)
        image = rgb_to_image(rgb, header)
        text = describe(rgb).text
        self._images.publish(image)
        self._observations.publish(
            ObservationMsg(header=header, observation_id=content_id("", [rgb], []), images=[image], text=text)
        )

    def destroy_node(self) -> None:
        self._source.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros camera_sim [--ros-args -p source:=video -p path:=clip.mp4]`."""
    rclpy.init(args=args)
    try:
        node = CameraSim()
    except (ValueError, FileNotFoundError) as exc:
        rclpy.logging.get_logger(NODE_NAME).error(f"cannot start: {exc}")
        rclpy.try_shutdown()
        return 1
    return spin_until_shutdown(node, SingleThreadedExecutor())


if __name__ == "__main__":
    raise SystemExit(main())
