"""The arm controller's own parameters, read from the node that serves our trajectories through its parameter service
(rcl_interfaces/GetParameters), so what ``control.arm.controller_setup`` needs is asked of the controller itself.

The node is found in the graph, not guessed from the action's name: the one publishing the action's status (an
action server's node: a joint_trajectory_controller's is the controller, named as in the controller manager), or on
the trajectory topic the one subscriber that is no observer (``OBSERVERS``). Each parameter is asked alone: rclcpp
answers a request naming any parameter its node lacks with no values at all, so an older or newer controller's
missing names (open_loop_control is Humble's, interpolate_from_desired_state Jazzy's on) would hide the rest.
"""

import time
from typing import Any

from rcl_interfaces.srv import GetParameters
from rclpy.callback_groups import CallbackGroup
from rclpy.client import Client
from rclpy.node import Node
from rclpy.parameter import parameter_value_to_python

from oxygen_ros.nodes.future_wait import wait

POLL_S = 0.1
# nodes that subscribe to a topic to show or record it (ros2 topic echo, rosbag2, bridges, GUIs): on the trajectory
# topic they are no controller, so a goal with only them listening is refused, not played to nobody
OBSERVERS = ("_ros2cli", "rosbag2", "foxglove_bridge", "rosbridge", "rqt", "rviz", "plotjuggler")


def _qualified(info) -> str:
    return f"{info.node_namespace.rstrip('/')}/{info.node_name}"


class ControllerParams:
    """Reads parameters of the controller at ``target`` (a resolved action name, or with ``on_topic`` a topic)."""

    def __init__(self, node: Node, target: str, on_topic: bool, group: CallbackGroup) -> None:
        self._node, self._target, self._on_topic, self._group = node, target, on_topic, group
        self._client: tuple[str, Client] | None = None  # the last controller's parameter client

    def controllers(self) -> list[str]:
        """The fully qualified names of the nodes serving ``target`` now."""
        if self._on_topic:
            infos = [i for i in self._node.get_subscriptions_info_by_topic(self._target)
                     if not i.node_name.startswith(OBSERVERS)]  # fmt: skip
        else:
            infos = self._node.get_publishers_info_by_topic(f"{self._target}/_action/status")
        return sorted({_qualified(info) for info in infos})

    async def read(self, names: list[str], wait_s: float) -> tuple[str, dict[str, Any] | None]:
        """(the controller, its value of each of ``names``: None where it has no such parameter); the values are
        None when no single controller serves ``target`` or its parameter service does not answer within ``wait_s``
        (its name is '' when there is none, or several)."""
        serving = self.controllers()
        if len(serving) != 1:
            return "", None
        client = self._client_of(serving[0])
        waited = 0.0
        while not client.service_is_ready():
            if waited >= wait_s:
                return serving[0], None
            await wait(self._node, None, POLL_S)
            waited += POLL_S
        asked = [client.call_async(GetParameters.Request(names=[name])) for name in names]  # all on their way at once
        deadline, values = time.monotonic() + wait_s, {}
        for name, future in zip(names, asked):
            if not future.done():
                await wait(self._node, future, max(deadline - time.monotonic(), 0.0))
            if not future.done() or future.exception() is not None:
                for pending in asked:
                    client.remove_pending_request(pending)  # an answer after this is dropped, not kept
                return serving[0], None
            response = future.result()
            values[name] = parameter_value_to_python(response.values[0]) if response.values else None
        return serving[0], values

    def _client_of(self, controller: str) -> Client:
        if self._client is None or self._client[0] != controller:
            if self._client is not None:
                self._node.destroy_client(self._client[1])
            self._client = controller, self._node.create_client(GetParameters, f"{controller}/get_parameters",
                                                                callback_group=self._group)  # fmt: skip
        return self._client[1]
