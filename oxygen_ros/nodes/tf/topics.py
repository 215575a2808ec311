"""tf2_ros's listener and broadcasters, for where tf2_ros is not installed: the same topics, message and QoS
(/tf: depth 100; /tf_static: transient local, so a late listener still gets every static transform), and the same
``sendTransform`` calls, so ``backend`` hands out either. The names are absolute, as tf2_ros's are: a namespaced
robot remaps /tf and /tf_static in its launch file."""

from collections.abc import Iterable

from geometry_msgs.msg import TransformStamped
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile
from tf2_msgs.msg import TFMessage

from oxygen_ros.nodes.tf.tree import TransformTree

TF_TOPIC, STATIC_TOPIC = "/tf", "/tf_static"
DYNAMIC_QOS = QoSProfile(depth=100, history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE)
STATIC_LISTENER_QOS = QoSProfile(depth=100, history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.TRANSIENT_LOCAL)
STATIC_BROADCASTER_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.TRANSIENT_LOCAL)


class TransformListener:
    """Feeds ``tree`` from /tf and /tf_static; a refused transform is logged (throttled) and skipped."""

    def __init__(self, tree: TransformTree, node: Node) -> None:
        self._tree, self._logger = tree, node.get_logger()
        group = ReentrantCallbackGroup()  # never behind a callback that waits for a transform
        node.create_subscription(TFMessage, TF_TOPIC, self._on_dynamic, DYNAMIC_QOS, callback_group=group)
        node.create_subscription(TFMessage, STATIC_TOPIC, self._on_static, STATIC_LISTENER_QOS, callback_group=group)

    def _on_dynamic(self, msg: TFMessage) -> None:
        self._add(msg, static=False)

    def _on_static(self, msg: TFMessage) -> None:
        self._add(msg, static=True)

    def _add(self, msg: TFMessage, static: bool) -> None:
        for transform in msg.transforms:
            try:
                self._tree.set(transform, static)
            except ValueError as exc:
                self._logger.warning(f"ignoring a transform: {exc}", throttle_duration_sec=5.0)


class TransformBroadcaster:
    def __init__(self, node: Node) -> None:
        self._publisher = node.create_publisher(TFMessage, TF_TOPIC, DYNAMIC_QOS)

    def sendTransform(self, transforms: TransformStamped | Iterable[TransformStamped]) -> None:  # noqa: N802 (tf2_ros's name)
        self._publisher.publish(TFMessage(transforms=_listed(transforms)))


class StaticTransformBroadcaster:
    """Every static transform this node ever sent goes out in each message (one per child frame, the newest):
    /tf_static keeps only the last message per publisher."""

    def __init__(self, node: Node) -> None:
        self._publisher = node.create_publisher(TFMessage, STATIC_TOPIC, STATIC_BROADCASTER_QOS)
        self._sent: dict[str, TransformStamped] = {}

    def sendTransform(self, transforms: TransformStamped | Iterable[TransformStamped]) -> None:  # noqa: N802 (tf2_ros's name)
        self._sent |= {transform.child_frame_id: transform for transform in _listed(transforms)}
        self._publisher.publish(TFMessage(transforms=list(self._sent.values())))


def _listed(transforms: TransformStamped | Iterable[TransformStamped]) -> list[TransformStamped]:
    return [transforms] if isinstance(transforms, TransformStamped) else list(transforms)
