"""The arm controller's own command, as a joint_trajectory_controller publishes it on ``~/controller_state``
(control_msgs/JointTrajectoryControllerState's ``reference``: its trajectory sampled now, its holds included): where a
controller that starts from its command (interpolate_from_desired_state, open_loop_control) starts a trajectory
while no plan of ours plays (after our stop, another client's motion, its own hold).

A JTC publishes it every update from Jazzy on (100-1000 Hz; Humble at state_publish_rate, 50 Hz by default; Humble
releases before 2.19 only ``~/state``): each message is only kept as it arrives, serialized, in a callback group of
its own, and the newest is read when a chunk is checked. A moving command is carried forward at its velocity only
briefly: with no plan of ours it is most likely braking, and a line would overshoot where it stops.
"""

import threading
from collections.abc import Callable

import numpy as np
from control_msgs.msg import JointTrajectoryControllerState
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message

from oxygen_ros import bounds

MOVING_AGE_S = 0.1  # a moving command heard longer ago than this is not carried forward: not known
NEWEST = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)  # (a JTC publishes reliable: compatible)


class ControllerCommand:
    """The newest ``reference`` heard on the topic followed (none at first); ``clock``: node-clock seconds."""

    def __init__(self, node: Node, clock: Callable[[], float]) -> None:
        self._node, self._clock = node, clock
        self._group = MutuallyExclusiveCallbackGroup()  # one message at a time, in the order they came
        self._lock = threading.Lock()  # the executor's callback and the goal's checks
        self._newest: tuple[bytes, float] | None = None  # serialized message, arrival
        self.topic, self._subscription = "", None

    def follow(self, topic: str) -> None:
        """Listen on ``topic`` from now on ('' = on none): the ~/controller_state of the controller found serving
        the trajectory, where its parameters say it starts from its command."""
        if topic == self.topic:
            return
        if self._subscription is not None:
            self._node.destroy_subscription(self._subscription)
            self._subscription = None
        with self._lock:
            self._newest, self.topic = None, topic
        if topic:  # (a message of the topic left, still on its way to its callback, is not kept)
            self._subscription = self._node.create_subscription(
                JointTrajectoryControllerState, topic, lambda raw: self._on_message(topic, raw), NEWEST,
                callback_group=self._group, raw=True)  # fmt: skip

    def heard(self) -> bool:
        """Something publishes on the topic followed."""
        return self._node.count_publishers(self.topic) > 0

    def _on_message(self, topic: str, raw: bytes) -> None:
        arrival = self._clock()
        with self._lock:
            if topic == self.topic:
                self._newest = raw, arrival

    def now(self, names: tuple[str, ...], timeout_s: float) -> tuple[np.ndarray, np.ndarray] | None:
        """(positions, velocities) of ``names`` as the controller commands them now; None when it said nothing
        within ``timeout_s`` (a moving command: MOVING_AGE_S), or not of each of ``names``, or nothing finite."""
        with self._lock:
            newest = self._newest
        if newest is None:
            return None
        raw, arrival = newest
        age = self._clock() - arrival
        if not 0.0 <= age <= timeout_s:  # (a clock that went back: not known either)
            return None
        try:
            msg = deserialize_message(raw, JointTrajectoryControllerState)
        except Exception:  # noqa: BLE001 (rclpy raises its own kinds): a message that does not read says nothing
            return None
        joints, reference = list(msg.joint_names), msg.reference
        if len(joints) > bounds.STATE or len(reference.positions) != len(joints) or not set(names) <= set(joints) or \
                len(reference.velocities) not in (0, len(joints)):  # fmt: skip
            return None
        rows = [joints.index(name) for name in names]
        given = bool(reference.velocities)  # (interpolation "none" leaves them out: at rest)
        velocity = np.array([reference.velocities[i] if given else 0.0 for i in rows], dtype=np.float64)
        if np.any(velocity != 0.0) and age > MOVING_AGE_S:
            return None
        positions = np.array([reference.positions[i] for i in rows], dtype=np.float64) + velocity * age
        if not (np.isfinite(positions).all() and np.isfinite(velocity).all()):
            return None
        return positions, velocity
