"""The arm as ros2_control shows it to the instruction node: joint state in, limits from the URDF, trajectories out.

* `joint_states` (sensor_msgs/JointState, joint_state_broadcaster's): the newest position of each joint and when it
  arrived on the node clock; a joint never heard of, or heard of longer than ``input_timeout_s`` ago, is a named
  FAILED_PRECONDITION, never a default.
* `robot_description` (std_msgs/String, latched by robot_state_publisher): the URDF whose limits bound every target
  (``control.arm.joint_limits``), tightened by the joint_*_limits parameters.
* Out: each plan as a control_msgs/FollowJointTrajectory goal to `trajectory_action` (a joint_trajectory_controller,
  MoveIt's or a vendor's driver), or, with `trajectory_topic` set, as a trajectory_msgs/JointTrajectory on that topic
  (the controller's fire-and-forget input). A new goal preempts the controller's previous one (it aborts that goal
  INVALID_GOAL, "preempted": expected, not a fault); any other abort is a fault the stream ends on. Hold = cancel
  the active goal (the controller holds where the arm is), or on the topic one point at the measured positions.
"""

import math
from collections.abc import Callable

import numpy as np
from action_msgs.msg import GoalStatus
from builtin_interfaces.msg import Duration, Time
from control_msgs.action import FollowJointTrajectory
from rclpy.callback_groups import CallbackGroup
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from rcl_interfaces.msg import ParameterDescriptor
from sensor_msgs.msg import JointState
from std_msgs.msg import Header, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from oxygen_ros import bounds
from oxygen_ros.control.arm.joint_limits import JointLimit, joint_limits, urdf_limits
from oxygen_ros.control.arm.joint_map import JointMap
from oxygen_ros.control.arm.safety import SafeTargets
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes.action_client import ActionClient
from oxygen_ros.nodes.future_wait import wait

POLL_S = 0.1
NS = 1_000_000_000
PREEMPTED = "preempted"  # in the error_string of a goal the controller ended because a newer one arrived
PARAMETERS = {  # scalars: (default, description), read once
    "state_topic": ("joint_states", "sensor_msgs/JointState input: the arm's measured joint positions"),
    "description_topic": ("robot_description", "std_msgs/String input (latched): the URDF whose joint limits bound "
                          "every target"),  # fmt: skip
    "trajectory_action": ("arm_controller/follow_joint_trajectory", "control_msgs/FollowJointTrajectory server the "
                          "chunks go to (a joint_trajectory_controller)"),  # fmt: skip
    "trajectory_topic": ("", "trajectory_msgs/JointTrajectory topic to send to instead of trajectory_action (the "
                         "controller's fire-and-forget input); '' = the action"),  # fmt: skip
    "action_space": ("joint_position", "what a chunk's dimensions are: joint_position (absolute targets) or "
                     "joint_delta (relative to the state the chunk was computed from)"),  # fmt: skip
    "limit_margin": (0.02, "a target at most this far past a position limit (rad or m) is clamped onto it; further "
                     "is refused and the arm holds"),  # fmt: skip
    "max_start_jump": (0.1, "a plan that starts the arm from rest may put its first target at most this far from the "
                       "measured position (rad or m)"),  # fmt: skip
    "input_timeout_s": (0.5, "joint states older than this stop the arm (FAILED_PRECONDITION), seconds"),
    "answer_wait_s": (1.0, "how long the controller may take to accept a trajectory, seconds"),
}
RANGES = {"limit_margin": (0.0, 1.0), "max_start_jump": (0.0, 10.0), "input_timeout_s": (0.0, 60.0),
          "answer_wait_s": (0.0, 60.0)}  # fmt: skip
POSITIVE = ("input_timeout_s", "answer_wait_s", "max_start_jump")
NAME_LISTS = {
    "action_joint_names": "the joints of the model's action dimensions, in order (ros2_control names; a gripper "
    "dimension included); empty = the model's chunks go to no arm",
    "state_joint_names": "the joints whose positions form the model's state, in order; empty = action_joint_names",
}
NUMBER_LISTS = {
    "action_scale": "per action dimension, joint = action_scale * action + action_offset (e.g. 0.01745 for degrees); "
    "empty = 1",
    "action_offset": "per action dimension, added after action_scale (rad or m); empty = 0",
    "joint_lower_limits": "per action joint, a lower position limit tighter than the URDF's (NaN = the URDF's)",
    "joint_upper_limits": "per action joint, an upper position limit tighter than the URDF's (NaN = the URDF's)",
    "joint_velocity_limits": "per action joint, a velocity limit tighter than the URDF's (NaN = the URDF's)",
}


def declare_lists(node: Node) -> dict[str, list]:
    """Declare the array parameters (no defaults: an empty array is not a YAML default) and read them."""
    out: dict[str, list] = {}
    for table, kind in ((NAME_LISTS, Parameter.Type.STRING_ARRAY), (NUMBER_LISTS, Parameter.Type.DOUBLE_ARRAY)):
        for name, description in table.items():
            node.declare_parameter(name, kind, ParameterDescriptor(description=description, read_only=True))
            try:
                out[name] = list(node.get_parameter(name).value)
            except ParameterUninitializedException:
                out[name] = []
    for name in NAME_LISTS:
        names = out[name]
        if len(names) > bounds.STATE or len(set(names)) != len(names) or not all(names):
            raise ValueError(f"parameter {name} must be distinct non-empty names (at most {bounds.STATE}): {names}")
    return out


def stamp_of(seconds: float) -> Time:
    ns = round(seconds * NS)
    return Time(sec=ns // NS, nanosec=ns % NS)


def _duration(seconds: float) -> Duration:
    ns = round(seconds * NS)
    return Duration(sec=ns // NS, nanosec=ns % NS)


class ArmIO:
    """Raises ValueError naming a bad parameter (``settings``: PARAMETERS' values; ``lists``: declare_lists')."""

    def __init__(self, node: Node, settings: dict, lists: dict[str, list], group: CallbackGroup) -> None:
        self._node, self._settings = node, settings
        self.names: tuple[str, ...] = tuple(lists["action_joint_names"])
        self.state_names: tuple[str, ...] = tuple(lists["state_joint_names"]) or self.names
        self._limit_lists = [lists[k] for k in ("joint_lower_limits", "joint_upper_limits", "joint_velocity_limits")]
        try:
            self.map = JointMap.build(list(self.names), lists["action_scale"], lists["action_offset"],
                                      settings["action_space"])  # fmt: skip
        except EngineError as exc:
            raise ValueError(exc.message) from exc
        self._positions: dict[str, tuple[float, float]] = {}  # joint -> (position, arrival on the node clock, s)
        self._described: dict[str, JointLimit] = {}
        self._fault = ""  # why the controller ended a goal of ours (not a preemption)
        self._active = None  # the goal handle of the trajectory the controller is playing
        node.create_subscription(JointState, settings["state_topic"], self._on_state, 10, callback_group=group)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(String, settings["description_topic"], self._on_description, latched,
                                 callback_group=group)  # fmt: skip
        self._topic = settings["trajectory_topic"]
        if self._topic:
            self._publisher = node.create_publisher(JointTrajectory, self._topic, 10)
            self.target = node.resolve_topic_name(self._topic)
        else:
            self._client = ActionClient(node, FollowJointTrajectory, settings["trajectory_action"],
                                        callback_group=group)  # fmt: skip
            self.target = node.resolve_topic_name(settings["trajectory_action"])

    @property
    def configured(self) -> bool:
        return bool(self.names)

    def now(self) -> float:
        return self._node.get_clock().now().nanoseconds / NS

    # --- inputs ----------------------------------------------------------------------------------------------------
    def _on_state(self, msg: JointState) -> None:
        if len(msg.name) > bounds.STATE or len(msg.position) != len(msg.name):
            self._node.get_logger().warning(f"ignoring a JointState with {len(msg.name)} names and "
                                            f"{len(msg.position)} positions", throttle_duration_sec=5.0)  # fmt: skip
            return
        arrival = self.now()
        for name, position in zip(msg.name, msg.position):
            if math.isfinite(position):
                self._positions[name] = (position, arrival)

    def _on_description(self, msg: String) -> None:
        try:
            self._described = urdf_limits(msg.data)
        except EngineError as exc:
            self._node.get_logger().error(f"{exc.message}: keeping the limits had before")

    def measured(self, names: tuple[str, ...]) -> np.ndarray:
        """The newest positions of ``names``; FAILED_PRECONDITION naming a joint never heard of or too old."""
        now, timeout = self.now(), self._settings["input_timeout_s"]
        out = []
        for name in names:
            if name not in self._positions:
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: no position on "
                                  f"{self._node.resolve_topic_name(self._settings['state_topic'])} yet")  # fmt: skip
            position, arrival = self._positions[name]
            if now - arrival > timeout:
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: its position is {now - arrival:.2f} s "
                                  f"old, over input_timeout_s {timeout:g}")  # fmt: skip
            out.append(position)
        return np.asarray(out, dtype=np.float64)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """(the state the model reads: ``state_joint_names``' positions, an action joint's in the model's units;
        the action joints in the model's units: a delta chunk's origin), read together now."""
        joints = self.measured(self.state_names)
        index = {name: i for i, name in enumerate(self.names)}
        state = np.array([(q - self.map.offset[index[n]]) / self.map.scale[index[n]] if n in index else q
                          for n, q in zip(self.state_names, joints)])  # fmt: skip
        return state, self.map.to_model(self.measured(self.names))

    def limits(self) -> list[JointLimit]:
        """The action joints' limits now (FAILED_PRECONDITION naming a joint without any)."""
        return joint_limits(list(self.names), self._described, *self._limit_lists)

    # --- the controller ------------------------------------------------------------------------------------------
    async def ready(self, wait_s: float) -> bool:
        """Whether the controller is there (a topic always is), waiting up to ``wait_s`` for its action server."""
        waited = 0.0
        while not self._topic and not self._client.server_is_ready():
            if waited >= wait_s:
                return False
            await wait(self._node, None, POLL_S)
            waited += POLL_S
        return True

    def take_fault(self) -> str:
        """Why the controller ended one of our goals since the last call ('' = it did not)."""
        fault, self._fault = self._fault, ""
        return fault

    async def send(self, start: float, times: np.ndarray, safe: SafeTargets) -> str:
        """Play ``safe`` from node-clock time ``start`` (point i at ``start + times[i]``); '' when the controller
        took it, else why not."""
        points = [JointTrajectoryPoint(positions=p.tolist(), velocities=v.tolist(), time_from_start=_duration(t))
                  for p, v, t in zip(safe.positions, safe.velocities, times)]  # fmt: skip
        trajectory = JointTrajectory(header=Header(stamp=stamp_of(start)), joint_names=list(self.names), points=points)
        if self._topic:
            self._publisher.publish(trajectory)
            return ""
        answered, handle = await wait(self._node, self._client.send_goal_async(
            FollowJointTrajectory.Goal(trajectory=trajectory)), self._settings["answer_wait_s"])  # fmt: skip
        if not answered:
            return f"{self.target} did not answer within answer_wait_s {self._settings['answer_wait_s']:g} s"
        if not handle.accepted:
            return f"{self.target} rejected the trajectory (see the controller's log)"
        self._active = handle
        handle.get_result_async().add_done_callback(lambda f, h=handle: self._on_result(h, f.result()))
        return ""

    def _on_result(self, handle, response) -> None:
        result = response.result
        if self._active is handle:
            self._active = None
        if response.status == GoalStatus.STATUS_ABORTED and not (
            result.error_code == result.INVALID_GOAL and PREEMPTED in result.error_string
        ):
            self._fault = f"{self.target} aborted the trajectory: error_code {result.error_code}: " \
                f"{result.error_string[: bounds.TEXT_CHARS]}"  # fmt: skip

    def hold(self, log: Callable[[str], None]) -> None:
        """Stop the arm where it is: cancel the goal being played (the controller holds), or on the topic send one
        point at the measured positions (without fresh positions nothing can be sent: the controller's own
        timeout, cmd_timeout, must stop it)."""
        if not self._topic:
            if self._active is not None:
                self._active.cancel_goal_async()
                self._active = None
            return
        try:
            here = self.measured(self.names)
        except EngineError as exc:
            log(f"cannot hold on {self.target}: {exc.message}")
            return
        point = JointTrajectoryPoint(positions=here.tolist(), velocities=[0.0] * len(here),
                                     time_from_start=_duration(0.1))  # fmt: skip
        self._publisher.publish(JointTrajectory(joint_names=list(self.names), points=[point]))
