"""What a node executable runs when its node refuses its parameters: a node of the same name that serves nothing and
says why on /diagnostics (ERROR, every second) until it is stopped.

Why not exit: `ros2 launch` respawns a node that exits whatever its exit status (Humble's launch has no retry
limit), so a refused parameter would restart the process every respawn delay, each start failing the same way and
costing an interpreter's start-up on the robot's CPU. Staying up refusing is what a lifecycle node does when its
configure fails (the inference node, nav2's): an operator sees one ERROR in rqt_robot_monitor, the task's clients
find no server and say so, and fixing the parameter file and restarting the node (or the launch) brings it up.
"""

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

REPORT_PERIOD_S = 1.0  # as the inference node's /diagnostics


class Refusal(Node):
    """``name`` as the node would have been (the launch's name and namespace remaps apply); ``reason`` the error."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name)
        self.reason = reason
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(REPORT_PERIOD_S, self._report)
        self._report()

    def _report(self) -> None:
        status = DiagnosticStatus(
            level=DiagnosticStatus.ERROR, name=f"{self.get_fully_qualified_name().lstrip('/')}: parameters",
            message=f"cannot start: {self.reason}", values=[KeyValue(key="serving", value="nothing")],
        )  # fmt: skip
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diagnostics.publish(msg)
