"""An rclpy ActionClient that may be created and destroyed on a node another thread is already spinning.

rclpy 9.1.2's ``ActionClient.__init__`` adds itself to its node's waitables (waking the executor) and only then
creates ``self._lock`` (ros2/rclpy#1589, fixed upstream later): an executor that rebuilds its wait set in between
calls ``get_num_entities``, which takes that lock, and its spin dies with AttributeError. Here the lock exists before
the client is registered and stays the client's one lock: rclpy's later assignment is ignored, so no two threads
ever hold different locks. Its logger (the one other attribute rclpy sets after registering) is set first too.

Destroyed, the same way round (ros2/rclpy#1284, #1385): an executor that listed the node's waitables just before
enters each (a destroyed handle: InvalidHandle, passed over) and then adds every one it listed to the wait set, the
destroyed one too, and its spin dies with RCLError "action client pointer is invalid". Here a destroyed client adds
nothing: it is marked before its handle goes, and one the executor entered in time is kept until it leaves it.
"""

import threading
from typing import Any

from rclpy.action import ActionClient as RclpyActionClient
from rclpy.node import Node
from rclpy.task import Future


def cancel_if_accepted(sending: Future) -> None:
    """A done callback for a goal's ``send_goal_async`` future nobody waits for any more: a goal the server took
    after all is cancelled, not left running."""
    handle = sending.result() if sending.exception() is None else None
    if handle is not None and handle.accepted:
        handle.cancel_goal_async()


class ActionClient(RclpyActionClient):
    def __init__(self, node: Node, action_type: Any, action_name: str, **kwargs: Any) -> None:
        self._destroyed = False
        self._first_lock = threading.Lock()
        self._logger = node.get_logger().get_child("action_client")
        super().__init__(node, action_type, action_name, **kwargs)

    @property
    def _lock(self) -> threading.Lock:
        return self._first_lock

    @_lock.setter
    def _lock(self, _: threading.Lock) -> None:
        """rclpy assigns its own lock after registering the client: the one made first stays."""

    def destroy(self) -> None:
        self._destroyed = True  # first: an executor listing the waitables now adds nothing of this client
        super().destroy()

    def add_to_wait_set(self, wait_set: Any) -> None:
        if not self._destroyed:
            super().add_to_wait_set(wait_set)
