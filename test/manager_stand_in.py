"""A ros2_control controller manager's ``list_controllers`` as it answers, for tests that switch a controller off:
every controller it has loaded with its lifecycle state, under the manager's usual node name in a namespace."""

from controller_manager_msgs.msg import ControllerState
from controller_manager_msgs.srv import ListControllers
from rclpy.context import Context
from rclpy.node import Node

JTC = "joint_trajectory_controller/JointTrajectoryController"


class ControllerManager(Node):
    """``states``: controller name -> state ('active', 'inactive', ...), which a test may change as it runs."""

    def __init__(self, context: Context, namespace: str, states: dict[str, str]) -> None:
        super().__init__("controller_manager", namespace=namespace, context=context)
        self.states = states
        self.create_service(ListControllers, "~/list_controllers", self._list)

    def _list(self, request: ListControllers.Request, response: ListControllers.Response) -> ListControllers.Response:
        response.controller = [ControllerState(name=name, state=state, type=JTC) for name, state in self.states.items()]
        return response
