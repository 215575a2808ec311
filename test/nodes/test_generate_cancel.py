"""A Generate goal cancelled before its request is made: rclpy marks a goal cancelling only once the cancel callback
returned, and the goal's request is made on another executor thread, so the goal's own check can miss the cancel;
the server marks it, and the goal ends without the request ever reaching the engine, its result CANCELLED (aborted,
as rclpy allows from executing; cancelled once rclpy marked it)."""

import asyncio
from types import SimpleNamespace

from rclpy.action import CancelResponse
from rclpy.node import Node
from sensor_msgs.msg import Image

from oxygen_ros.action import Generate
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.msg import ChatMessage
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.nodes.generate_server import GenerateServer
from oxygen_ros.nodes.image_budget import ImageBudget


class Handle:
    """What the server reads and calls of a rclpy goal handle, cancel not marked yet; as rclpy's, it can be
    cancelled only once marked cancelling."""

    def __init__(self) -> None:
        self.goal_id = SimpleNamespace(uuid=bytes(range(16)))
        frame = Image(width=2, height=2, encoding="rgb8", step=6, data=bytes(12))
        self.request = Generate.Goal(prompt="what is on the table?", observation=[ObservationMsg(images=[frame])],
                                     messages=[ChatMessage(role="user", content="hi", images=[frame])])  # fmt: skip
        self.is_cancel_requested, self.is_active, self.ended = False, True, ""

    def canceled(self) -> None:
        assert self.is_cancel_requested, "rclpy refuses to cancel an executing goal (RCLError)"
        self.ended = "canceled"

    def abort(self) -> None:
        self.ended = "aborted"


class Engine:
    def __init__(self) -> None:
        self.submitted: list = []

    def busy(self) -> str:
        return ""

    def submit(self, greq, **_):
        self.submitted.append(greq)
        raise AssertionError("a cancelled goal's request was submitted")


def test_a_goal_cancelled_before_its_request_is_made_never_reaches_the_engine(ros_context):
    node = Node("generate_cancel_test", context=ros_context)
    try:
        engine = Engine()
        settings = SimpleNamespace(max_prompt_chars=1000, sampling_defaults=SamplingParams)
        server = GenerateServer(node, lambda: (engine, lambda goal: None, settings, "active"), None,
                                ImageBudget(1 << 20), None)  # fmt: skip
        handle = Handle()
        assert server._cancel(handle) == CancelResponse.ACCEPT
        result = asyncio.run(server._execute(handle))
        assert (handle.ended, result.error_code, engine.submitted) == ("aborted", "CANCELLED", [])
        assert server._cancelled == set() and server._requests == {}  # nothing kept of the goal
        # nor its images by rclpy, which keeps the ended goal's handle (its request) for its result's keep time
        assert (handle.request.observation, handle.request.messages, server._images.held) == ([], [], 0)
        handle = Handle()  # marked cancelling by rclpy by the time the goal checks: cancelled
        handle.is_cancel_requested = True
        assert server._cancel(handle) == CancelResponse.ACCEPT
        assert asyncio.run(server._execute(handle)).error_code == "CANCELLED" and handle.ended == "canceled"
        handle = Handle()  # its cancel comes after the goal ended: nothing is marked
        handle.is_active = False
        server._cancel(handle)
        assert server._cancelled == set()
        server.server.destroy()
    finally:
        node.destroy_node()
