"""TF for oxygen_ros's nodes through one interface, whichever implementation is installed: tf2_ros's Buffer,
TransformListener and broadcasters on a robot, else ``topics`` + ``tree`` (the same topics and message), so the
simulator, the tests and a robot exchange transforms with each other and with any tf2 node."""

from collections.abc import Iterable
from typing import Protocol

from geometry_msgs.msg import TransformStamped
from rclpy.node import Node
from rclpy.time import Time

from oxygen_ros.nodes.tf import topics
from oxygen_ros.nodes.tf.rigid import Rigid, of_transform
from oxygen_ros.nodes.tf.tree import NS, TransformTree, TransformUnavailable, stamp_ns

try:
    import tf2_ros
except ImportError:  # no tf2 here (the PyPI wheels ship none): our own listener and broadcasters
    tf2_ros = None


class Broadcaster(Protocol):
    def sendTransform(self, transforms: TransformStamped | Iterable[TransformStamped]) -> None: ...  # noqa: N802


class Transforms:
    """Transforms between frames as this node hears them on /tf and /tf_static."""

    def __init__(self, node: Node, tolerance_s: float) -> None:
        """``tolerance_s``: a lookup at a time the frames' histories do not reach is answered with the nearest
        transform (the latest, with tf2_ros) when that is at most this far away in time."""
        self._tolerance_ns = int(tolerance_s * NS)
        if tf2_ros is None:
            self._tree = TransformTree(tolerance_s)
            self._listener = topics.TransformListener(self._tree, node)
        else:
            self._buffer = tf2_ros.Buffer(node=node)
            self._listener = tf2_ros.TransformListener(self._buffer, node)  # kept: dropped, it unsubscribes

    def lookup(self, target: str, source: str, at_ns: int | None = None) -> tuple[Rigid, int]:
        """``source`` -> ``target`` coordinates at ``at_ns`` (None = the latest time known) and the time it holds
        at, in nanoseconds; TransformUnavailable saying why there is none now (never waits)."""
        if tf2_ros is None:
            return self._tree.lookup(target, source, at_ns)
        try:
            try:
                msg = self._buffer.lookup_transform(target, source, Time() if at_ns is None else Time(nanoseconds=at_ns))
            except tf2_ros.ExtrapolationException:
                if at_ns is None:
                    raise
                msg = self._buffer.lookup_transform(target, source, Time())
                if abs(stamp_ns(msg) - at_ns) > self._tolerance_ns:
                    raise
        except tf2_ros.TransformException as exc:
            raise TransformUnavailable(f"{target} <- {source}: {exc}") from exc
        return of_transform(msg.transform), stamp_ns(msg)


def broadcasters(node: Node) -> tuple[Broadcaster, Broadcaster]:
    """(dynamic on /tf, static on /tf_static)."""
    if tf2_ros is None:
        return topics.TransformBroadcaster(node), topics.StaticTransformBroadcaster(node)
    return tf2_ros.TransformBroadcaster(node), tf2_ros.StaticTransformBroadcaster(node)
