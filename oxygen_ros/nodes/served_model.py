"""What a task node knows of the served model: how many images one request may carry (0 = a text-only model).

It decides how a task node sends the camera frame: a model that reads images gets the frame's own images (so its
image tokens, not a description, are what the tasks share in the pool), a text-only one the scene describer's text.
The inference node says it in every KvPoolStats (``max_images``), published on `/oxygen/pool_stats` while it is
active, so a restart with another model is followed within one tick without asking; until the first message comes,
each request asks `/oxygen/get_pool_stats` once. An unconfigured node's snapshot is empty (total_blocks 0) and
says nothing. The count is bounded by ``bounds.IMAGES`` before use.
"""

from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node

from oxygen_ros.msg import KvPoolStats
from oxygen_ros import bounds
from oxygen_ros.nodes.future_wait import wait
from oxygen_ros.nodes.qos import SERVICE_QUEUE
from oxygen_ros.srv import GetPoolStats

STATS_TOPIC = "oxygen/pool_stats"
STATS_SERVICE = "oxygen/get_pool_stats"


class ServedModel:
    def __init__(self, node: Node, group: CallbackGroup, wait_s: float) -> None:
        self._node, self._wait_s = node, wait_s
        self._max_images: int | None = None  # None: not heard from a configured inference node yet
        node.create_subscription(KvPoolStats, STATS_TOPIC, self._on_stats, 1, callback_group=group)
        self._stats = node.create_client(GetPoolStats, STATS_SERVICE, qos_profile=SERVICE_QUEUE, callback_group=group)

    def _on_stats(self, msg: KvPoolStats) -> None:
        if msg.total_blocks:
            self._max_images = min(msg.max_images, bounds.IMAGES)

    async def max_images(self) -> int:
        """Images a request about a frame may carry now; 0 while nothing is known (the text path serves either kind
        of model: a vision model still reads the frame the inference node keeps under its id)."""
        if self._max_images is None and self._stats.service_is_ready():
            future = self._stats.call_async(GetPoolStats.Request())
            ok, response = await wait(self._node, future, self._wait_s)
            if ok:
                self._on_stats(response.stats)
            else:
                self._stats.remove_pending_request(future)
        return self._max_images or 0
