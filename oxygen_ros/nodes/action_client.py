"""An rclpy ActionClient that may be created on a node another thread is already spinning.

rclpy 9.1.2's ``ActionClient.__init__`` adds itself to its node's waitables (waking the executor) and only then
creates ``self._lock`` (ros2/rclpy#1589, fixed upstream later): an executor that rebuilds its wait set in between
calls ``get_num_entities``, which takes that lock, and its spin dies with AttributeError. Here the lock exists before
the client is registered and stays the client's one lock: rclpy's later assignment is ignored, so no two threads
ever hold different locks. Its logger (the one other attribute rclpy sets after registering) is set first too.
"""

import threading
from typing import Any

from rclpy.action import ActionClient as RclpyActionClient
from rclpy.node import Node


class ActionClient(RclpyActionClient):
    def __init__(self, node: Node, action_type: Any, action_name: str, **kwargs: Any) -> None:
        self._first_lock = threading.Lock()
        self._logger = node.get_logger().get_child("action_client")
        super().__init__(node, action_type, action_name, **kwargs)

    @property
    def _lock(self) -> threading.Lock:
        return self._first_lock

    @_lock.setter
    def _lock(self, _: threading.Lock) -> None:
        """rclpy assigns its own lock after registering the client: the one made first stays."""
