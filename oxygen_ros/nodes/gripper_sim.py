"""`gripper_sim`: a simulated gripper on its own controller, beside `arm_sim`, as ros2_control runs one
(position_controllers/GripperActionController): `control_msgs/action/GripperCommand` on `gripper_controller/gripper_cmd`
(or, with `action_type`, `ParallelGripperCommand` as parallel_gripper_controllers serves it: ``gripper_actions``),
its joint's `sensor_msgs/JointState` on `joint_states` (joint_state_broadcaster publishes every joint; state
subscribers merge by name).

The jaw moves at `velocity` toward the goal's position, clamped to [`lower`, `upper`] (the URDF's limits of the
SO-100 jaw by default); the goal SUCCEEDS with reached_goal once there, a newer goal preempts it (CANCELED, as
preempt_active_goal ends it), a cancel stops the jaw where it is; a goal with no position (or not a number) is
rejected. Timed on the node clock.

What a real jaw meets, settable at run time: something between the jaws (`object_position`) stops it closing (toward
`lower`, as the SO-100's jaw closes), and a goal whose jaw has not moved for `stall_timeout` short of its position
ends stalled, as GripperActionController's check_for_success ends it (ABORTED, or SUCCEEDED with `allow_stalling`;
not reached either way); motors switched off (`torque` false: torque disabled, an emergency stop's safe torque off)
leave the controller running and the jaw still, so every goal short of where it stands stalls; a controller switched
off (`active` false, as `ros2 control switch_controllers --deactivate` leaves it) keeps its action server, which
takes goals (a newer one still preempts) while nothing moves the jaw and no goal ends. Switched on again it holds the
jaw where it is (on_activate's command) and the goal it kept ends ABORTED, not reached (the real controller's new
action server never answers it: ended here so no client waits forever).
"""

import math
import threading
from typing import Any

import numpy as np
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Header

from oxygen_ros.nodes import gripper_actions
from oxygen_ros.nodes.arm_sim import ActiveGoal
from oxygen_ros.nodes.declare import declare
from oxygen_ros.nodes.qos import ACTION_SERVER_QOS
from oxygen_ros.nodes.spin import run

NODE_NAME = "gripper_sim"
TOLERANCE = 1e-4  # rad or m: reached
PARAMETERS: dict[str, tuple[Any, str]] = {
    "joint_name": ("gripper", "the jaw's joint (default: a LeRobot SO-100's)"),
    "initial_position": (0.0, "where the jaw starts, rad or m"),
    "lower": (0.0, "the jaw's lower position limit, rad or m"),
    "upper": (1.7, "the jaw's upper position limit, rad or m"),
    "velocity": (3.0, "how fast the jaw moves, rad/s or m/s"),
    "state_rate_hz": (50.0, "joint_states and goal feedback published per second, 1 to 1000"),
    "action_name": ("gripper_controller/gripper_cmd", "the gripper's action server"),
    "action_type": ("GripperCommand", gripper_actions.DESCRIPTION),
    "state_topic": ("joint_states", "sensor_msgs/JointState output (the jaw's joint only)"),
    "stall_timeout": (1.0, "a goal whose jaw has not moved for this long short of its position ends stalled "
                      "(GripperActionController's stall_timeout), s"),
    "allow_stalling": (False, "a stalled goal SUCCEEDS (not reached) instead of ABORTING (GripperActionController's "
                       "allow_stalling)"),
    "active": (True, "the controller is active; false: as a deactivated GripperActionController, its action server "
               "takes goals and nothing moves the jaw or ends them (settable at run time)"),
    "torque": (True, "the jaw's motors are on; false: the controller runs and nothing moves the jaw, so its goals "
               "stall (settable at run time)"),
    "object_position": (math.nan, "something between the jaws: the jaw closing (toward lower) stops here; NaN = "
                        "nothing (settable at run time), rad or m"),
}  # fmt: skip
SETTABLE = ("active", "torque", "object_position")  # what happens to the robot while it runs


class GripperSim(Node):
    """Raises ValueError naming the parameter when it cannot start."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        value = declare(self, PARAMETERS, ranges={"state_rate_hz": (1.0, 1000.0), "velocity": (1e-6, 1e3),
                                                  "stall_timeout": (0.0, 60.0)},
                        read_only=[name for name in PARAMETERS if name not in SETTABLE])  # fmt: skip
        if not (np.isfinite([value["lower"], value["upper"]]).all() and value["lower"] < value["upper"]
                and value["lower"] <= value["initial_position"] <= value["upper"]):  # fmt: skip
            super().destroy_node()
            raise ValueError(f"parameters lower < upper must be finite and hold initial_position, got {value}")
        try:
            self._action = gripper_actions.action_type(value["action_type"], "action_type")
        except ValueError:
            super().destroy_node()
            raise
        self._joint, self._velocity = value["joint_name"], value["velocity"]
        self._lower, self._upper = value["lower"], value["upper"]
        self._stall_s, self._allow_stalling = value["stall_timeout"], value["allow_stalling"]
        self._lock = threading.Lock()
        self._position, self._target = value["initial_position"], value["initial_position"]
        self._last = self._moved_at = self._now()  # the last tick, and when the jaw last moved (or took a goal)
        self._working = True  # whether the controller ran at the last tick
        self._active: ActiveGoal | None = None
        self._starting: dict[bytes, ActiveGoal] = {}
        self._states = self.create_publisher(JointState, value["state_topic"], 10)
        group = ReentrantCallbackGroup()
        self._server = ActionServer(
            self, self._action, value["action_name"], execute_callback=self._execute,
            goal_callback=self._on_goal, handle_accepted_callback=self._on_accepted,
            cancel_callback=lambda _: CancelResponse.ACCEPT, callback_group=group, **ACTION_SERVER_QOS,
        )  # fmt: skip
        self.create_timer(1.0 / value["state_rate_hz"], self._tick, callback_group=group)

    def destroy_node(self) -> None:
        with self._lock:
            if self._active is not None:
                self._active.end("abort", self._result(reached=False))
                self._active = None
        self._server.destroy()
        super().destroy_node()

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _result(self, reached: bool, stalled: bool = False):
        return gripper_actions.result(self._action, self._joint, self._position, reached, stalled)

    def _on_goal(self, request) -> GoalResponse:
        if gripper_actions.goal_position(self._action, request) is None:
            self.get_logger().error("Received a gripper goal with no position: rejecting")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _on_accepted(self, handle: ServerGoalHandle) -> None:
        with self._lock:
            if self._active is not None:  # preempted
                self._active.end("canceled", self._result(reached=False))
            self._target = min(max(gripper_actions.goal_position(self._action, handle.request), self._lower),
                               self._upper)  # fmt: skip
            self._active = self._starting[bytes(handle.goal_id.uuid)] = ActiveGoal(handle, self)
            self._moved_at = self._now()  # a stall is timed from the goal's start
            handle.execute()

    async def _execute(self, handle: ServerGoalHandle):
        with self._lock:
            active = self._starting.pop(bytes(handle.goal_id.uuid))
        return await active.ended

    def _tick(self) -> None:
        working, held_at = self.get_parameter("active").value, self.get_parameter("object_position").value
        driven = working and self.get_parameter("torque").value
        with self._lock:
            clock = self.get_clock().now()
            now = clock.nanoseconds * 1e-9
            step = self._velocity * max(now - self._last, 0.0) if driven else 0.0
            self._last = now
            active = self._active
            if working and not self._working:  # switched on: it holds the jaw; the goal it kept is lost
                self._target = self._position
                if active is not None:
                    active.end("abort", self._result(reached=False))
                    active = self._active = None
            self._working = working
            if active is not None and active.handle.is_cancel_requested:
                self._target = self._position
                active.end("canceled", self._result(reached=False))
                active = self._active = None
            stop = self._target  # short of the object when closing on it
            if math.isfinite(held_at) and self._position >= held_at - TOLERANCE:
                stop = min(max(stop, held_at), self._upper)
            moved = float(np.clip(stop - self._position, -step, step))
            self._position += moved
            if moved or not working:  # reactivated, a controller times a stall afresh
                self._moved_at = now
            speed = moved * self._velocity / step if step > 0 else 0.0
            self._states.publish(JointState(header=Header(stamp=clock.to_msg()), name=[self._joint],
                                            position=[self._position], velocity=[speed]))  # fmt: skip
            if active is None or not working:  # a switched-off controller ends nothing
                return
            active.handle.publish_feedback(gripper_actions.feedback(self._action, self._joint, self._position))
            if abs(self._target - self._position) <= TOLERANCE:
                active.end("succeed", self._result(reached=True))
                self._active = None
            elif now - self._moved_at > self._stall_s:
                active.end("succeed" if self._allow_stalling else "abort", self._result(reached=False, stalled=True))
                self._active = None


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros gripper_sim [--ros-args -p joint_name:=gripper]`."""
    return run(GripperSim, SingleThreadedExecutor, NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
