"""What `oxygen-ros demo` watches while the three tasks run, each item stamped when it arrives (seconds since the
recorder started): the arm's action chunks, the base's velocity commands, the camera frames, the inference node's
pool snapshots, pool images and diagnostics, the goals' feedback and the VQA requests' spans.

Subscription callbacks run on the graph's executor threads while the demo's own thread polls services; every field
is only appended to (atomic under the GIL) or replaced whole, so readers see consistent items.
"""

import time
from dataclasses import dataclass
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import TwistStamped
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rclpy.task import Future
from sensor_msgs.msg import Image

from oxygen_ros.msg import ActionChunk, KvPoolStats, Observation
from oxygen_ros.nodes.polling import poll_until

COUNTERS = ("generated_tokens", "prefix_hit_blocks")  # the inference node's /diagnostics values the demo reads


def wait_for(future: Future, timeout_s: float, what: str) -> Any:
    """The result of a future the graph's executor completes."""
    poll_until(future.done, timeout_s, f"answer from {what}")
    return future.result()


@dataclass
class Span:
    label: str
    start: float
    end: float | None = None


class Recorder:
    def __init__(self, node: Node) -> None:
        self.start = time.monotonic()
        self.frame: Observation | None = None  # the newest scene text (camera_sim sends the frame's pixels apart)
        self.image: Image | None = None  # the newest camera frame
        self.chunks: list[float] = []  # /arm/action_chunk arrivals
        self.cmd_vel: list[tuple[float, float, float]] = []  # (t, linear x m/s, angular z rad/s)
        self.pool: list[tuple[float, KvPoolStats]] = []  # polled /oxygen/get_pool_stats answers
        self.pool_images: list[tuple[float, Image]] = []
        self.counters: list[tuple[float, dict[str, int]]] = []  # COUNTERS from /diagnostics
        self.narration: list[tuple[float, str]] = []  # instruction feedback, when its text changes
        self.reasoning: list[tuple[float, str]] = []  # navigation feedback, when its text changes
        self.requests: list[Span] = []  # the demo's own /vqa/ask calls
        self._node = node
        self._frames = [
            node.create_subscription(Observation, "/oxygen/observation", self._on_frame, 1),
            node.create_subscription(Image, "/camera/image_raw", self._on_image, qos_profile_sensor_data),
        ]
        node.create_subscription(ActionChunk, "/arm/action_chunk", lambda _: self.chunks.append(self.now()), 50)
        node.create_subscription(TwistStamped, "/cmd_vel", self._on_cmd_vel, 50)  # as navigation_node sends it
        node.create_subscription(Image, "/oxygen/pool_image", lambda m: self.pool_images.append((self.now(), m)), 5)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    def now(self) -> float:
        return time.monotonic() - self.start

    def begin(self) -> None:
        """The tasks start now: time zero for everything recorded from here on."""
        self.start = time.monotonic()
        for series in (self.chunks, self.cmd_vel, self.pool, self.pool_images, self.counters):
            series.clear()

    def _on_frame(self, msg: Observation) -> None:
        if msg.text:
            self.frame = msg

    def _on_image(self, msg: Image) -> None:
        self.image = msg

    def first_image(self, timeout_s: float) -> Image:
        poll_until(lambda: self.image is not None and self.frame is not None, timeout_s, "a frame from camera_sim")
        return self.image

    def last_frame(self) -> Observation:
        """The newest scene text; stops listening (each frame is a full image, and the tasks need the CPU)."""
        for subscription in self._frames:
            self._node.destroy_subscription(subscription)
        return self.frame

    def _on_cmd_vel(self, msg: TwistStamped) -> None:
        self.cmd_vel.append((self.now(), msg.twist.linear.x, msg.twist.angular.z))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if all(key in values for key in COUNTERS):
                self.counters.append((self.now(), {key: int(values[key]) for key in COUNTERS}))

    def on_narration(self, msg: Any) -> None:
        """FollowInstruction feedback (through the action client)."""
        self._changed(self.narration, msg.feedback.narration)

    def on_reasoning(self, msg: Any) -> None:
        """Navigate feedback (through the action client)."""
        self._changed(self.reasoning, msg.feedback.reasoning)

    def _changed(self, into: list[tuple[float, str]], text: str) -> None:
        """Feedback streams at the goal's rate; a new text is a new answer of the language head (or a new reason
        to stop)."""
        text = text.strip()
        if text and (not into or into[-1][1] != text):
            into.append((self.now(), text))

    def counters_after(self, t: float, timeout_s: float = 5.0) -> dict[str, int]:
        """The first diagnostics counters published after ``t`` (the node publishes them once a second)."""
        return poll_until(lambda: next((values for when, values in self.counters if when > t), None), timeout_s,
                          "/diagnostics from the inference node")  # fmt: skip
