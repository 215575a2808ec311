"""The frames of camera_sim's simulated world (REP 105), as TF and odometry: map (the room: origin at its south-west
corner, x east, y north, metres) -> odom (where the robot started, as a wheel-odometry origin is) -> base_link (the
robot, from its simulated pose), and map -> camera_link -> camera_optical_frame: the simulated camera is the overhead
one of ``perception.camera``, fixed above the room's centre looking straight down (image right = east, image down =
south), not carried by the robot, so its frames hang from map. Odometry is exact here, so map -> odom is static."""

from dataclasses import dataclass

from builtin_interfaces.msg import Time
from geometry_msgs.msg import TransformStamped
from nav_msgs.msg import Odometry

from oxygen_ros.perception.camera import ROOM_DEPTH_CM, ROOM_WIDTH_CM
from oxygen_ros.perception.scene import RobotPose
from oxygen_ros.nodes.tf.rigid import Rigid, of_pose, planar

CAMERA_HEIGHT_M = 3.0  # nominal: the overhead camera is orthographic (one scale), its height changes no pixel
OPTICAL_IN_LINK = Rigid(rotation=(-0.5, 0.5, -0.5, 0.5))  # REP 103: z forward, x right, y down (from x forward, z up)
OPTICAL_IN_MAP = Rigid((ROOM_WIDTH_CM / 200.0, ROOM_DEPTH_CM / 200.0, CAMERA_HEIGHT_M), (1.0, 0.0, 0.0, 0.0))


@dataclass(frozen=True)
class Frames:
    map: str
    odom: str
    base: str
    camera: str
    optical: str


def metres(pose: RobotPose) -> Rigid:
    """The robot's pose in the room (cm) as base_link in map."""
    return planar(pose.x_cm / 100.0, pose.y_cm / 100.0, pose.yaw_rad)


def stamped(rigid: Rigid, parent: str, child: str, stamp: Time) -> TransformStamped:
    out = TransformStamped(child_frame_id=child, transform=rigid.to_msg())
    out.header.stamp, out.header.frame_id = stamp, parent
    return out


def static_transforms(start: RobotPose, frames: Frames, stamp: Time) -> list[TransformStamped]:
    """map -> odom at the robot's start pose, and the overhead camera's frames."""
    return [
        stamped(metres(start), frames.map, frames.odom, stamp),
        stamped(OPTICAL_IN_MAP * OPTICAL_IN_LINK.inverse(), frames.map, frames.camera, stamp),
        stamped(OPTICAL_IN_LINK, frames.camera, frames.optical, stamp),
    ]


def odometry(start: RobotPose, pose: RobotPose, command: tuple[float, float], frames: Frames, stamp: Time) -> Odometry:
    """The robot's pose in odom and the command it drives with (cm/s, rad/s) as its twist in base_link."""
    in_odom = metres(start).inverse() * metres(pose)
    msg = Odometry(child_frame_id=frames.base)
    msg.header.stamp, msg.header.frame_id = stamp, frames.odom
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    (p.x, p.y, p.z), (q.x, q.y, q.z, q.w) = in_odom.translation, in_odom.rotation
    msg.twist.twist.linear.x, msg.twist.twist.angular.z = command[0] / 100.0, command[1]
    return msg


def base_transform(odom: Odometry) -> TransformStamped:
    """odom -> base_link, as the odometry says."""
    return stamped(of_pose(odom.pose.pose), odom.header.frame_id, odom.child_frame_id, odom.header.stamp)
