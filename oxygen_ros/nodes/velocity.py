"""The base's velocity command as the robot's stack takes it: geometry_msgs/TwistStamped, what ROS 2 Jazzy's
diff_drive_controller and nav2 use, or plain Twist for older stacks (``cmd_vel_stamped: false``). One place, so the
navigation node that sends it and the simulator that obeys it always agree on the type."""

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist, TwistStamped

Command = Twist | TwistStamped


def command_type(stamped: bool) -> type[Command]:
    return TwistStamped if stamped else Twist


def command(twist: Twist, stamped: bool, stamp: Time, frame_id: str) -> Command:
    """``twist`` as the message ``stamped`` selects, in ``frame_id`` (REP 105: the robot's body frame)."""
    if not stamped:
        return twist
    out = TwistStamped(twist=twist)
    out.header.stamp, out.header.frame_id = stamp, frame_id
    return out


def twist_of(msg: Command) -> Twist:
    return msg.twist if isinstance(msg, TwistStamped) else msg
