"""The arm as ros2_control shows it to the instruction node: joint state in, limits from the URDF, trajectories out.

* `joint_states` (sensor_msgs/JointState, joint_state_broadcaster's): the newest position of each joint and when it
  arrived on the node clock; a joint never heard of, or heard of longer than ``input_timeout_s`` ago, is a named
  FAILED_PRECONDITION, never a default.
* `robot_description` (std_msgs/String, latched by robot_state_publisher): the URDF whose limits bound every target
  (``control.arm.joint_limits``), tightened by the joint_*_limits parameters.
* `<controller>/controller_state` (control_msgs/JointTrajectoryControllerState, a joint_trajectory_controller's),
  read with controller_starts_from commanded where its parameters say it starts from its command: where it starts a
  trajectory while no plan of ours plays (after a hold, another client's motion, its own hold; ``controller_check``).
* Out: each plan as a control_msgs/FollowJointTrajectory goal to `trajectory_action` (a joint_trajectory_controller,
  MoveIt's or a vendor's driver), or, with `trajectory_topic` set, as a trajectory_msgs/JointTrajectory on that topic
  (the controller's fire-and-forget input; a subscriber that only records or shows it, ``controller_params.OBSERVERS``,
  is no controller). A new goal of ours preempts the controller's previous one (JTC ends that goal CANCELED,
  INVALID_GOAL, "Current goal cancelled due to new incoming action.": expected, not a fault); any other end of our
  newest goal is a fault the stream ends on (``Fault``). Hold = one point at rest just past where the plan has the
  arm (or from where it is measured), braking within the limits from the state the controller starts it from,
  replacing the trajectory playing (on the action or the topic; a cancel would make the controller hold the
  measured position at once, a jolt at speed).
  A gripper on its own controller (`gripper_joint_names`) is left out of the trajectory (``gripper_io``).
* Before a goal moves the arm, the controller's own parameters are read (``controller_check``): a
  joint_trajectory_controller that starts a trajectory elsewhere than `controller_starts_from` says, or compares a
  freely turning joint without wraparound, refuses the goal.
"""

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from action_msgs.msg import GoalStatus
from control_msgs.action import FollowJointTrajectory
from rclpy.callback_groups import CallbackGroup
from rclpy.duration import Duration
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from rclpy.task import Future
from rcl_interfaces.msg import ParameterDescriptor
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Header, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from oxygen_ros import bounds
from oxygen_ros.control.arm.controller_setup import STARTS_FROM
from oxygen_ros.control.arm.joint_limits import JointLimit, joint_limits, urdf_limits
from oxygen_ros.control.arm.state_entries import MAX_SPEED, reported_velocities, state_entries
from oxygen_ros.control.arm.joint_map import JointMap
from oxygen_ros.control.arm.safety import SafeTargets
from oxygen_ros.control.arm.turns import difference, turning
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes.action_client import ActionClient
from oxygen_ros.nodes.controller_check import ControllerCheck
from oxygen_ros.nodes.future_wait import wait
from oxygen_ros.nodes.gripper_io import GripperIO
from oxygen_ros.nodes.qos import STOP_ACK_S
from oxygen_ros.nodes.stamps import NS, duration_of, seconds

POLL_S = 0.1
MAX_CLOCK_SKEW_S = 1.0  # a JointState stamped further than this from the node clock comes from another clock
HOLD_MIN_S = 0.1  # the soonest a hold's point is due: the controller decelerates over at least this
MIN_STOP_S = 0.02  # a stop squeezed against a position limit still takes this long
MIN_SPEED_SCALING = 99.0  # percent: a controller scaled below this plays the plan visibly slower than it is timed
MIN_DIFFERENCE_S, MAX_DIFFERENCE_S = 5e-3, 0.5  # readings that far apart give a velocity where the driver gives none
ANSWERS_KEPT = 8  # the controller's latest answer times whose median is a stop's lead (one slow answer moves nothing)
PARAMETERS = {  # scalars: (default, description), read once
    "state_topic": ("joint_states", "sensor_msgs/JointState input: the arm's measured joint positions"),
    "description_topic": ("robot_description", "std_msgs/String input (latched): the URDF whose joint limits bound "
                          "every target"),  # fmt: skip
    "trajectory_action": ("arm_controller/follow_joint_trajectory", "control_msgs/FollowJointTrajectory server the "
                          "chunks go to (a joint_trajectory_controller)"),  # fmt: skip
    "trajectory_topic": ("", "trajectory_msgs/JointTrajectory topic to send to instead of trajectory_action (the "
                         "controller's fire-and-forget input); '' = the action"),  # fmt: skip
    "action_space": ("joint_position", "what a chunk's dimensions are: joint_position (absolute targets) or "
                     "joint_delta (relative to the state the chunk was computed from; gripper_joint_names' stay "
                     "absolute)"),  # fmt: skip
    "limit_margin": (0.02, "a target at most this far past a position limit (rad or m) is clamped onto it; further "
                     "is refused and the arm holds"),  # fmt: skip
    "max_start_jump": (0.1, "a plan that starts the arm from rest may put its first target at most this far from the "
                       "measured position (rad or m)"),  # fmt: skip
    "input_timeout_s": (0.5, "joint states, or a camera frame when asked for a chunk, older than this stop the arm "
                        "(FAILED_PRECONDITION), seconds"),  # fmt: skip
    "speed_scaling_topic": ("", "std_msgs/Float64 input, percent (ur_robot_driver's speed_scaling_state_broadcaster/"
                            "speed_scaling): plans are timed at full speed, so a goal is refused, or ended with the "
                            "arm held, while it is under 99 or older than input_timeout_s; '' = none (the controller "
                            "plays at full speed)"),  # fmt: skip
    "answer_wait_s": (1.0, "how long the controller may take to accept a trajectory, and to answer the arm's stop "
                      "before a goal's result (at most 2.5 s there: half a shutdown's wait), seconds"),  # fmt: skip
    "max_tracking_error": (0.3, "a moving arm this far (rad or m) from where its plan has it, checked every period, "
                           "stops the goal with the arm held where it is: it is not following (blocked, a fault, a "
                           "controller that dropped the trajectory, another client)"),  # fmt: skip
    "controller_starts_from": ("measured", "where the arm's controller starts each new trajectory: measured (a "
                               "joint_trajectory_controller's default; from rest for a joint whose driver reports "
                               "no velocity), measured_at_rest (its state_interfaces lack velocity: every joint from "
                               "rest) or commanded (its interpolate_from_desired_state, Humble's open_loop_control): "
                               "a chunk's first segment is checked, and a hold timed, from there; a "
                               "joint_trajectory_controller's own parameters, read before each goal, must agree "
                               "(else the goal is refused)"),  # fmt: skip
}
RANGES = {"limit_margin": (0.0, 1.0), "max_start_jump": (0.0, 10.0), "input_timeout_s": (0.0, 60.0),
          "answer_wait_s": (0.0, 60.0), "max_tracking_error": (0.0, 10.0)}  # fmt: skip
POSITIVE = ("input_timeout_s", "answer_wait_s", "max_start_jump", "max_tracking_error")
# the tolerances a joint may have its own of (a prismatic joint's in m beside revolute ones in rad): the scalar is
# every joint's unless its per-joint list is set
TOLERANCES = {"limit_margin": "joint_limit_margins", "max_start_jump": "joint_max_start_jumps",
              "max_tracking_error": "joint_max_tracking_errors"}  # fmt: skip
NAME_LISTS = {
    "action_joint_names": "the joints of the model's action dimensions, in order (ros2_control names; a gripper "
    "dimension included); empty = the model's chunks go to no arm",
    "state_joint_names": "the model's state, in order: joints (their positions), or joint.pos / joint.vel (LeRobot's "
                         "names); empty = action_joint_names",
    "gripper_joint_names": "the action joint (at most one) that goes to the gripper's controller (gripper_action) "
    "instead of the trajectory; empty = every action joint in the trajectory",
    "absolute_joint_names": "action joints whose actions stay absolute under action_space joint_delta, beside the "
    "gripper_joint_names one (a jaw inside the trajectory: openpi's DeltaActions mask); empty = that gripper's only",
}
NUMBER_LISTS = {
    "action_scale": "per action dimension, joint = action_scale * action + action_offset (e.g. 0.01745 for degrees); "
    "empty = 1",
    "action_offset": "per action dimension, added after action_scale (rad or m); empty = 0",
    "joint_lower_limits": "per action joint, a lower position limit tighter than the URDF's (NaN = the URDF's)",
    "joint_upper_limits": "per action joint, an upper position limit tighter than the URDF's (NaN = the URDF's)",
    "joint_velocity_limits": "per action joint, a velocity limit tighter than the URDF's (NaN = the URDF's)",
    "joint_acceleration_limits": "per action joint, an acceleration limit (rad/s^2 or m/s^2; MoveIt's "
    "joint_limits.yaml max_acceleration; a URDF has none): a chunk whose spline accelerates harder is refused; empty "
    "or NaN = none",
    "joint_limit_margins": "per action joint, its limit_margin (rad or m: a prismatic joint's in m); empty = "
    "limit_margin for each",
    "joint_max_start_jumps": "per action joint, its max_start_jump (rad or m); empty = max_start_jump for each",
    "joint_max_tracking_errors": "per action joint, its max_tracking_error (rad or m); empty = max_tracking_error for "
    "each",
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


def _difference_velocity(before: tuple[float, float, float, float], position: float, arrival: float,
                         stamp: float) -> float:  # fmt: skip
    """A joint's velocity from its reading ``before`` and this one (by their stamps, else their arrivals); NaN when
    they are too close in time or too far apart to tell (MAX_DIFFERENCE_S), or a wrap or a jump (over half a turn)."""
    then, dt = before[0], (stamp - before[3]) if stamp > 0 and before[3] > 0 else arrival - before[2]
    if not MIN_DIFFERENCE_S <= dt <= MAX_DIFFERENCE_S or abs(position - then) > math.pi:
        return math.nan
    return (position - then) / dt


def _per_joint(scalar: str, listed: list[float], default: float, joints: int) -> np.ndarray:
    """Tolerance ``scalar`` per joint [joints]: its list (``TOLERANCES``) if set, one per action joint within the
    scalar's range, else ``default`` for every joint; ValueError naming the list."""
    name, (low, high) = TOLERANCES[scalar], RANGES[scalar]
    if not listed:
        return np.full(joints, default)
    positive = scalar in POSITIVE
    lowest = "above" if positive else "at least"
    if len(listed) != joints or not all((v > low if positive else v >= low) and v <= high for v in listed):
        raise ValueError(f"parameter {name} must be empty or {joints} numbers (one per action joint), each {lowest} "
                         f"{low:g} and at most {high:g}: {listed}")  # fmt: skip
    return np.array(listed, dtype=np.float64)


@dataclass(frozen=True)
class Fault:
    """Why the controller ended our newest goal when we did not ask it to. ``taken_over``: it ended CANCELED, as a
    joint_trajectory_controller ends a goal another client's goal preempted, or a goal someone else cancelled, or
    one it dropped on deactivation: the controller holds the arm or plays the other client's trajectory, and a stop
    of ours would preempt that (ABORTED, for a tolerance or an error, it holds the arm where it is)."""

    why: str
    taken_over: bool


def _behind(before: tuple[float, float, float, float], arrival: float, stamp: float) -> float:
    """How much older a reading is than the one stored ``before``: by their stamps where both have one (the order
    the driver sent them in), else by arrival."""
    return before[3] - stamp if stamp and before[3] else before[2] - arrival


def _braking_times(gap: np.ndarray, moving: np.ndarray, start_velocity: np.ndarray,
                   acceleration: np.ndarray) -> np.ndarray:  # fmt: skip
    """Per joint, the shortest T over which the controller's cubic, from the measured state (``gap`` from where the
    stop starts, moving at ``start_velocity``) to rest at ``moving T / 2`` past it, keeps within ``acceleration``:
    its acceleration is linear in time, 6 gap / T^2 - (4 v0 - 3 v) / T at the start and -6 gap / T^2 - (3 v - 2 v0)
    / T at the end, so A T^2 - w T - 6 gap >= 0 with w the larger velocity term (|v| when v0 = v: braking at A
    from speed v takes v / A)."""
    w = np.maximum(np.abs(4 * start_velocity - 3 * moving), np.abs(3 * moving - 2 * start_velocity))
    with np.errstate(invalid="ignore", divide="ignore"):
        times = (w + np.sqrt(w * w + 24 * acceleration * np.abs(gap))) / (2 * acceleration)
    return np.where(np.isfinite(acceleration), times, 0.0)


def _or_rest(velocity: np.ndarray | None, columns: list[int]) -> np.ndarray:
    return np.zeros(len(columns)) if velocity is None else np.nan_to_num(velocity[columns], nan=0.0)


def _goal_id(handle) -> bytes:
    return bytes(handle.goal_id.uuid)


class ArmIO:
    """Raises ValueError naming a bad parameter (``settings``: PARAMETERS' values; ``lists``: declare_lists')."""

    def __init__(self, node: Node, settings: dict, lists: dict[str, list], group: CallbackGroup) -> None:
        self._node, self._settings = node, settings
        if settings["controller_starts_from"] not in STARTS_FROM:
            raise ValueError(f"parameter controller_starts_from must be one of {list(STARTS_FROM)}, got "
                             f"{settings['controller_starts_from']!r}")  # fmt: skip
        self.starts_from_command = settings["controller_starts_from"] == "commanded"
        self._all_from_rest = settings["controller_starts_from"] == "measured_at_rest"
        self.names: tuple[str, ...] = tuple(lists["action_joint_names"])
        self.state = state_entries(tuple(lists["state_joint_names"]) or self.names)
        self._wanted = set(self.names) | {entry.joint for entry in self.state}
        grippers = lists["gripper_joint_names"]
        if len(grippers) > 1 or not set(grippers) <= set(self.names):
            raise ValueError(f"parameter gripper_joint_names must be at most one of action_joint_names, got {grippers}")
        self.gripper_column = self.names.index(grippers[0]) if grippers else None
        self._arm_columns = [i for i in range(len(self.names)) if i != self.gripper_column]
        self.arm_names = tuple(self.names[i] for i in self._arm_columns)  # what the trajectory names
        self._limit_lists = [lists[k] for k in ("joint_lower_limits", "joint_upper_limits", "joint_velocity_limits",
                                                "joint_acceleration_limits")]
        self.tolerances = {scalar: _per_joint(scalar, lists[listed], settings[scalar], len(self.names))
                           for scalar, listed in TOLERANCES.items()}  # fmt: skip
        absolute = lists["absolute_joint_names"]
        if not set(absolute) <= set(self.names):
            raise ValueError(f"parameter absolute_joint_names must name action_joint_names, got {absolute}")
        try:
            self.map = JointMap.build(list(self.names), lists["action_scale"], lists["action_offset"],
                                      settings["action_space"], tuple(grippers) + tuple(absolute))  # fmt: skip
        except EngineError as exc:
            raise ValueError(exc.message) from exc
        self._lock = threading.Lock()  # what the executor's callbacks and the goal's clock thread share
        self._joints: dict[str, tuple[float, float, float, float]] = {}  # joint -> (position, velocity (NaN: none),
        # arrival, stamp), seconds
        self._estimated: dict[str, float] = {}  # joint -> its reported velocity, else one from its last two readings
        self._described: dict[str, JointLimit] = {}
        self._known_limits: list[JointLimit] | None = None  # the last limits read: a hold's, if they cannot be now
        self._fault: Fault | None = None  # why the controller ended our newest goal when we did not ask it to
        self._newest = None  # the handle of our newest accepted goal (the one the controller plays)
        self._live: dict[bytes, object] = {}  # our accepted goals not ended yet, by goal id
        self._cancelled: set[bytes] = set()  # of those, the ones we ended (cancelled, or replaced by a stop)
        self._stops: set[bytes] = set()  # of those, our stop trajectories (``hold``)
        self._stopping = False  # a stop was sent and no trajectory since: a hold now has nothing to stop
        self._holds = 0  # counts holds: a goal accepted after a hold that followed its sending is stopped at once
        self._sends = 0  # counts what went to the controller (trajectories and stops): what is newest
        # the newest stop goal's send on the action and our goals it replaces, until a trajectory is sent: a goal's
        # result waits for its answer (``stop_answered``)
        self._stop_sent: tuple[Future, set[bytes]] | None = None
        self._unanswered: set[Future] = set()  # each done once the controller's answer to a trajectory is handled
        self._answer_times: deque[float] = deque(maxlen=ANSWERS_KEPT)  # s from sending a goal to its acceptance
        node.create_subscription(JointState, settings["state_topic"], self._on_state, 10, callback_group=group)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(String, settings["description_topic"], self._on_description, latched,
                                 callback_group=group)  # fmt: skip
        self._scaling: tuple[float, float] | None = None  # the controller's speed scaling (percent, arrival)
        if settings["speed_scaling_topic"]:
            node.create_subscription(Float64, settings["speed_scaling_topic"], self._on_scaling, 10,
                                     callback_group=group)  # fmt: skip
        self.gripper = GripperIO(node, settings, grippers[0] if grippers else None, group)
        self._topic = settings["trajectory_topic"]
        if self._topic:
            self._publisher = node.create_publisher(JointTrajectory, self._topic, 10)
            self.target = node.resolve_topic_name(self._topic)
        else:
            self._client = ActionClient(node, FollowJointTrajectory, settings["trajectory_action"],
                                        callback_group=group)  # fmt: skip
            self.target = node.resolve_topic_name(settings["trajectory_action"])
        # its command timed on this node's clock, as the joint states are (``now``, whatever it is)
        self.controller = ControllerCheck(node, self.target, bool(self._topic), settings["controller_starts_from"],
                                          group, lambda: self.now())  # fmt: skip

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
        arrival, stamp = self.now(), seconds(msg.header.stamp)
        velocities = reported_velocities(len(msg.name), msg.velocity)
        with self._lock:  # two of these may run at once (a reentrant group): an older reading never replaces a newer
            for name, position, velocity in zip(msg.name, msg.position, velocities):
                if name in self._wanted and math.isfinite(position):  # only the joints we command or read: bounded
                    before = self._joints.get(name)
                    if before is not None and 0 < _behind(before, arrival, stamp) < MAX_DIFFERENCE_S:
                        continue  # (further behind: the clock went back, a simulator reset; the newest is all)
                    self._estimated[name] = velocity if before is None or math.isfinite(velocity) else \
                        _difference_velocity(before, position, arrival, stamp)  # fmt: skip
                    self._joints[name] = (position, velocity, arrival, stamp)

    def command_now(self, start: np.ndarray, velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``start`` / ``velocity`` [len(names)] with the arm joints where the controller commands them now
        (``ControllerCheck.command_of``), where it starts a trajectory while no plan of ours plays; None when it did
        not say, or does not start from its command there."""
        said = self.controller.command_of(self.arm_names, self._settings["input_timeout_s"])
        if said is None:
            return None
        positions, velocities = np.array(start, dtype=np.float64), np.array(velocity, dtype=np.float64)
        positions[self._arm_columns], velocities[self._arm_columns] = said
        return positions, velocities

    def _on_scaling(self, msg: Float64) -> None:
        self._scaling = (float(msg.data), self.now())

    def slowed(self) -> str:
        """Why the controller would play a plan slower than it is timed ('' = it would not, as far as we know):
        with ``speed_scaling_topic`` (a UR's scaled_joint_trajectory_controller), a scaling under MIN_SPEED_SCALING
        (the pendant's slider, a reduced or protective mode), none yet, or one older than input_timeout_s. Plans are
        timed at full speed: played slower, the arm falls behind them (chunks refused from a moving start, then
        not following)."""
        topic = self._settings["speed_scaling_topic"]
        if not topic:
            return ""
        where, scaling = self._node.resolve_topic_name(topic), self._scaling
        if scaling is None:
            return f"no speed scaling on {where} yet: the controller may play plans slower than they are timed"
        percent, arrival = scaling
        age, timeout = self.now() - arrival, self._settings["input_timeout_s"]
        if age > timeout:
            return f"the speed scaling on {where} is {age:.2f} s old, over input_timeout_s {timeout:g}"
        if not percent >= MIN_SPEED_SCALING:
            return (f"the controller's speed scaling is {percent:.0f}% (the pendant's slider, or a reduced or "
                    f"protective mode): plans are timed at full speed; set it to 100% and lower joint_velocity_limits "
                    "instead")  # fmt: skip
        return ""

    def _on_description(self, msg: String) -> None:
        try:
            self._described = urdf_limits(msg.data)
        except EngineError as exc:
            self._node.get_logger().error(f"{exc.message}: keeping the limits had before")

    def measured(self, names: tuple[str, ...]) -> np.ndarray:
        """The newest positions of ``names``; FAILED_PRECONDITION naming a joint never heard of, too old, or stamped
        on another clock (a driver on wall time under use_sim_time, or the reverse: its trajectories would be
        stamped in another era)."""
        return self._read(names)[:, 0]

    def reading(self, names: tuple[str, ...]) -> tuple[np.ndarray, float]:
        """``measured`` and when the oldest of its arm positions arrived (node clock, s; a gripper's aside): what a
        plan is compared with is where it had the arm then."""
        readings = self._read(names)
        arm = [i for i, name in enumerate(names) if name != self.gripper.name] or list(range(len(names)))
        return readings[:, 0], float(readings[arm, 2].min())  # a gripper on its own controller reports apart

    def start_state(self, names: tuple[str, ...], ahead_s: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Where the arm is ``ahead_s`` from now, when a controller taking a trajectory then starts it (a
        joint_trajectory_controller's default: from its measured state): each position carried forward to then at
        its velocity, and that velocity (where the joint states carry none, as a position-only driver's NaN: from its
        last two readings; 0 without them; the controller itself starts those from rest: ``from_rest``). Checked as
        ``measured`` says."""
        readings = self._read(names)
        estimated = np.array([self._estimated.get(name, math.nan) for name in names])
        velocity = np.nan_to_num(np.where(np.isfinite(readings[:, 1]), readings[:, 1], estimated), nan=0.0)
        return readings[:, 0] + velocity * (self.now() + ahead_s - readings[:, 2]), velocity

    def from_rest(self, names: tuple[str, ...]) -> np.ndarray:
        """Per joint of ``names``, whether the controller starts a new trajectory from rest: with
        controller_starts_from measured, a joint whose newest joint state carries no velocity (NaN: a position-only
        driver; a joint_trajectory_controller without a velocity state interface starts from rest: ros2_controllers'
        Trajectory::set_point_before_trajectory_msg); with measured_at_rest, every joint (its state_interfaces lack
        velocity while joint_state_broadcaster still reports one)."""
        if self.starts_from_command or self._all_from_rest:
            return np.full(len(names), self._all_from_rest)
        return self._no_velocity(names)

    def _no_velocity(self, names: tuple[str, ...]) -> np.ndarray:
        """Per joint of ``names``, whether its newest joint state carries no velocity (NaN)."""
        with self._lock:
            entries = [self._joints.get(name) for name in names]
        return np.array([entry is not None and not math.isfinite(entry[1]) for entry in entries], dtype=bool)

    def _read(self, names: tuple[str, ...]) -> np.ndarray:
        """[len(names), 3]: each joint's newest (position, velocity, arrival), checked as ``measured`` says."""
        entries = [self._joints.get(name) for name in names]  # then the clock: one arriving meanwhile is no "later"
        now, timeout = self.now(), self._settings["input_timeout_s"]
        out = []
        for name, entry in zip(names, entries, strict=True):
            if entry is None:
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: no position on "
                                  f"{self._node.resolve_topic_name(self._settings['state_topic'])} yet")  # fmt: skip
            position, velocity, arrival, stamp = entry
            if now - arrival > timeout:
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: its position is {now - arrival:.2f} s "
                                  f"old, over input_timeout_s {timeout:g}")  # fmt: skip
            if now < arrival:  # the node clock went back since: the reading cannot be dated
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: its position arrived "
                                  f"{arrival - now:.2f} s after now on this node's clock (it went back)")  # fmt: skip
            if stamp and abs(arrival - stamp) > MAX_CLOCK_SKEW_S:
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: its JointState is stamped "
                                  f"{arrival - stamp:+.1f} s from this node's clock: the driver and this node "
                                  "run on different clocks (use_sim_time?)")  # fmt: skip
            out.append((position, velocity, arrival))
        return np.asarray(out, dtype=np.float64).reshape(len(names), 3)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """(the state the model reads: ``state_joint_names``' positions and velocities, an action joint's in the
        model's units; the action joints in the model's units: a delta chunk's origin), read together now.
        FAILED_PRECONDITION naming a velocity the joint states do not carry."""
        readings = self._read(tuple(entry.joint for entry in self.state))
        index = {name: i for i, name in enumerate(self.names)}
        state = []
        for entry, (position, velocity, _) in zip(self.state, readings):
            if entry.velocity and not math.isfinite(velocity):
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"state entry {entry.name}: the joint states carry "
                                  f"no velocity for joint {entry.joint} (or one over {MAX_SPEED:g})")  # fmt: skip
            i = index.get(entry.joint)
            if entry.velocity:
                state.append(velocity if i is None else velocity / self.map.scale[i])
            else:
                state.append(position if i is None else (position - self.map.offset[i]) / self.map.scale[i])
        return np.array(state), self.map.to_model(self.measured(self.names))

    def limits(self) -> list[JointLimit]:
        """The action joints' limits now (FAILED_PRECONDITION naming a joint without any); the last known are kept
        for a hold."""
        self._known_limits = joint_limits(list(self.names), self._described, *self._limit_lists)
        return list(self._known_limits)

    # --- the controller ------------------------------------------------------------------------------------------
    async def missing(self, wait_s: float) -> str:
        """The controller that is not there ('' = both are: the arm's action server or a subscriber to its topic,
        and the gripper's server when it has one), waiting up to ``wait_s``."""
        waited = 0.0
        while not self._listening():
            if waited >= wait_s:
                return self.target
            await wait(self._node, None, POLL_S)
            waited += POLL_S
        return "" if await self.gripper.ready(max(wait_s - waited, 0.0)) else self.gripper.target

    def _listening(self) -> bool:
        """The action server is there, or on the topic a subscriber that is no observer (``controller_params``)."""
        return self._client.server_is_ready() if not self._topic else bool(self.controller.controllers())

    async def misconfigured(self, limits: list[JointLimit]) -> str:
        """Why the controller, by its own word, plays our trajectories otherwise than they are checked ('' = it
        does not, or cannot tell: ``ControllerCheck``), within ``answer_wait_s``; ``limits``: the action joints',
        which say the joints that turn freely."""
        reported = not self._no_velocity(self.arm_names).all()
        return await self.controller.misconfigured(self.arm_names, self._turning(limits), reported,
                                                   self._settings["answer_wait_s"])  # fmt: skip

    def check_ahead(self) -> None:
        """Start reading what ``misconfigured`` will ask of the controller (``ControllerCheck.read_ahead``), for the
        limits known now (none yet: it reads then)."""
        try:
            limits = self.limits()
        except EngineError:
            return
        self.controller.read_ahead(self.arm_names, self._turning(limits), self._settings["answer_wait_s"])

    def _turning(self, limits: list[JointLimit]) -> list[str]:
        """The trajectory's joints that turn freely (no position limits)."""
        turns = turning(limits)
        return [self.names[i] for i in self._arm_columns if turns[i]]

    def forget_fault(self) -> None:
        """A new goal starts: what ended an earlier one's trajectory is not its fault."""
        with self._lock:
            self._fault = None

    def take_fault(self) -> Fault | None:
        """Why the controller ended our newest goal since the last call, when we did not ask it to (None: it did
        not)."""
        with self._lock:
            fault, self._fault = self._fault, None
        return fault

    async def send(self, start: float, safe: SafeTargets) -> str:
        """Play ``safe``, planned from node-clock time ``start`` (point i due at ``start + safe.times[i]``); '' when the
        controller took it, else why not. Sent unstamped (stamp 0: the controller starts it when it takes it, point
        i ``safe.times[i]`` later), so a slow delivery or a controller's clock ahead of ours delays the plan instead of
        having the controller sample it mid-segment, a jump. A hold while the goal is on its way replaces it with a
        braking stop as soon as it is accepted, however late that is: no trajectory outlives a hold; one taken after
        its first target was due is refused and replaced by a braking stop from where the arm is (a stale plan; a
        cancel would have the controller hold the measured position at once, a jolt)."""
        arm = self._arm_columns
        points = [JointTrajectoryPoint(positions=p[arm].tolist(), velocities=v[arm].tolist(),
                                       time_from_start=duration_of(t))
                  for p, v, t in zip(safe.positions, safe.velocities, safe.times)]  # fmt: skip
        trajectory = JointTrajectory(header=Header(), joint_names=list(self.arm_names), points=points)
        if not self._listening():
            return f"{self.target} is not there (no action server, or no subscriber to the topic)"
        handled = None if self._topic else Future()
        with self._lock:
            self._sends += 1
            holds, sent_as, self._stopping, self._stop_sent = self._holds, self._sends, False, None
            if handled is not None:  # before it goes: what it preempts may end before it is answered
                self._unanswered.add(handled)
        if self._topic:
            self._publisher.publish(trajectory)
            return ""
        future = self._send_goal(trajectory)
        future.add_done_callback(lambda f: self._on_answer(f, holds, sent_as, handled))
        answered = False
        try:
            answered, handle = await wait(self._node, future, self._settings["answer_wait_s"])
        finally:
            if not answered:  # given up on (or the send broke off): a goal's end does not wait for it either
                with self._lock:
                    self._unanswered.discard(handled)
                handled.set_result(False)
        if not answered:
            return f"{self.target} did not answer within answer_wait_s {self._settings['answer_wait_s']:g} s"
        if not handle.accepted:
            return f"{self.target} rejected the trajectory (see the controller's log)"
        with self._lock:
            if self._holds != holds:
                return "the arm was told to hold while the trajectory was on its way"
        late = self.now() - start - float(safe.times[0])
        if late > 0:  # its plan is stale (the arm would be that late on every target): a stop replaces it here, so
            # it never plays on, whatever the caller does next (a hold of its own then finds the arm stopping)
            self.hold(None, self._node.get_logger().warning)
            return (f"{self.target} took the trajectory {late:.3f} s after its first target was due (raise "
                    "send_lead_s for a controller this slow)")  # fmt: skip
        return ""

    def _on_answer(self, future: Future, holds: int, sent_as: int, handled: Future) -> None:
        """The controller's answer to our trajectory handled (``_on_accepted``), then ``handled`` done: a goal's
        result waits for it (``stop_answered``)."""
        try:
            self._on_accepted(future.result() if future.exception() is None else None, holds, sent_as)
        finally:
            with self._lock:
                self._unanswered.discard(handled)
            handled.set_result(True)

    def _send_goal(self, trajectory: JointTrajectory) -> Future:
        """``trajectory`` as a goal on the action; its answer, once taken, is timed (``_stop_lead``)."""
        asked = self.now()
        future = self._client.send_goal_async(FollowJointTrajectory.Goal(trajectory=trajectory))
        future.add_done_callback(lambda f: self._time_answer(f, asked))
        return future

    def _time_answer(self, future: Future, asked: float) -> None:
        """The round trip of a goal of ours sent at ``asked`` and taken (``_stop_lead``)."""
        handle = future.result() if future.exception() is None else None
        if handle is not None and handle.accepted:
            answered = max(self.now() - asked, 0.0)  # (a simulated clock gone back)
            with self._lock:
                self._answer_times.append(answered)

    def _stop_lead(self) -> float:
        """How long after it is sent a stop reaches the controller: half the median round trip of its recent
        acceptances of our goals (the request's way; at most answer_wait_s; 0 on the topic, which answers nothing).
        The arm moves on meanwhile; the controller's next update, up to one period later, comes on top."""
        with self._lock:
            times = list(self._answer_times)
        return min(float(np.median(times)) / 2, self._settings["answer_wait_s"]) if times else 0.0

    def _on_accepted(self, handle, holds: int, sent_as: int) -> None:
        """Our trajectory (the ``sent_as``-th thing sent) taken. A hold came while it was on its way: it is ours to
        end (its ending is no fault); whatever was sent after it (the hold's stop, a newer trajectory) replaces it
        in the controller, and if nothing was (the hold could plan no stop), a stop from where the arm is does."""
        if handle is None or not handle.accepted:
            return
        key = _goal_id(handle)
        with self._lock:
            self._live[key] = handle
            self._newest = handle
            stale = self._holds != holds
            if stale:
                self._cancelled.add(key)
            unreplaced = stale and self._sends == sent_as
        handle.get_result_async().add_done_callback(lambda f: self._on_result(handle, f.result()))
        if unreplaced:
            self._send_stop(self._stop_point(None, None, self._node.get_logger().warning), {key})

    def _cancel(self, handle) -> None:
        with self._lock:
            self._cancelled.add(_goal_id(handle))
        handle.cancel_goal_async()

    def _cancel_live(self, keys: set[bytes]) -> None:
        """Cancel those of our goals ``keys`` names that have not ended."""
        with self._lock:
            handles = [self._live[key] for key in keys if key in self._live]
        for handle in handles:
            self._cancel(handle)

    def _on_result(self, handle, response) -> None:
        """Our newest goal ending any way but SUCCEEDED or cancelled by us is a fault: another client preempted
        it, someone cancelled it, or the controller aborted it (tolerances). An older goal ending is our own doing
        (the newest one preempted it)."""
        key = _goal_id(handle)
        with self._lock:
            self._live.pop(key, None)
            ours, stop = key in self._cancelled, key in self._stops
            self._cancelled.discard(key)
            self._stops.discard(key)
            if stop or handle is not self._newest or ours or response.status == GoalStatus.STATUS_SUCCEEDED:
                return  # a stop replaced (by a goal, ours or another client's) ends no goal: nothing of it runs
            if response.status == GoalStatus.STATUS_CANCELED and self._unanswered:
                return  # our trajectory on its way preempted it (its acceptance, which makes it the newest, may come
                # second: the two answers reach the executor's threads apart)
            result = response.result
            said = result.error_string[: bounds.TEXT_CHARS] or "cancelled by another client"
            self._fault = Fault(f"{self.target} ended the trajectory (status {response.status}, error_code "
                                f"{result.error_code}): {said}",
                                taken_over=response.status == GoalStatus.STATUS_CANCELED)  # fmt: skip

    def destroy(self) -> None:
        self.gripper.destroy()
        self.controller.destroy()
        if self._topic:  # a last hold acknowledged by the controller before the node goes
            self._publisher.wait_for_all_acked(Duration(seconds=STOP_ACK_S))
        else:
            self._client.destroy()  # rclpy's destroy_node leaves action clients alive (see InferClient.destroy)

    def hold(self, at: np.ndarray | None, log: Callable[[str], None], *, velocity: np.ndarray | None = None,
             stop: bool = True) -> None:  # fmt: skip
        """Stop the arm, decelerating: one trajectory point, at rest, replacing the one playing (on the action too: a
        cancel makes a joint_trajectory_controller hold the measured position at once, a jolt at speed). From
        ``at`` moving at ``velocity`` (where and how fast the plan has the arm now), else from the measured state
        carried forward, both carried on to when the stop will start (``_stop_lead``), the arm stops ``v T / 2``
        further on over ``T``: as long as the joints' acceleration limits need (at least HOLD_MIN_S), and as long as
        the controller's cubic from the measured position needs to stay within the velocity limits (1.5 x the mean
        speed); a position limit nearer than that, sooner, the steady deceleration that ends on it (at least
        MIN_STOP_S: a limit nearer than the arm moves in a third of that is passed by a few mrad);
        with joint states too old to read, from ``at`` timed for the farthest the arm may be from it (each joint's
        max_tracking_error: what the tracking check allows), a limit within the braking distance braked for so that
        the controller's cubic from that far on stays short of it.
        A goal of ours taken after the hold is replaced by another such stop, from where the arm is then; on the
        action, a stop the controller refuses (or none that can be planned: no joint states, no plan) cancels ours
        instead (the controller then holds where the arm is). Not ``stop``: nothing of ours plays (``Fault``'s
        taken_over), and nothing is sent, now or at a later hold; one of ours taken after it is stopped as above."""
        self.gripper.hold()
        with self._lock:
            self._holds += 1
            if self._stopping:  # nothing sent since the last stop: it is braking already (a second would cancel it)
                return
            if not stop:
                self._stopping, self._stop_sent = True, None
                return
            replaced = set(self._live)  # what the stop replaces (and a refused one cancels): ours to end
            self._cancelled.update(replaced)
        self._send_stop(self._stop_point(at, velocity, log), replaced)

    def _send_stop(self, stop: JointTrajectoryPoint | None, replaced: set[bytes]) -> None:
        """``stop`` to the controller, replacing our goals ``replaced``; None (no stop could be planned): those
        cancelled on the action instead."""
        with self._lock:
            self._sends += stop is not None
            mine = self._sends
        if stop is None:
            if not self._topic:
                self._cancel_live(replaced)
                self._mark_stopped(None, mine)  # cancelled: held where it is
            return
        trajectory = JointTrajectory(joint_names=list(self.arm_names), points=[stop])
        sent = None
        if self._topic:
            self._publisher.publish(trajectory)
        else:
            sending = self._send_goal(trajectory)
            sending.add_done_callback(lambda f: self._on_stop(f, replaced))
            sent = (sending, replaced)
        self._mark_stopped(sent, mine)  # sent: a hold before the next trajectory has nothing more to stop

    def _mark_stopped(self, sent: tuple[Future, set[bytes]] | None, mine: int) -> None:
        """The arm is stopping (``sent``: the stop on its way), unless something was sent after it (a trajectory
        sent meanwhile plays: a hold must stop it)."""
        with self._lock:
            if self._sends == mine:
                self._stopping, self._stop_sent = True, sent

    async def stop_answered(self, wait_s: float) -> str:
        """Wait up to ``wait_s`` for the controller's answer to the newest stop, so that a goal's result (and a
        shutdown, which waits for it) comes after it: a refused stop has ours cancelled then, while the node can
        still send. A trajectory still on its way (within its ``answer_wait_s``) is waited for first, up to
        ``wait_s`` too: taken after the hold, it brings a stop of its own (``_on_accepted``), which is then the
        newest, given its own ``wait_s``. '' when it was taken (or none is on the action's way), else what
        happened."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            unanswered = list(self._unanswered)
        for handled in unanswered:
            if not handled.done() and time.monotonic() < deadline:
                await wait(self._node, handled, deadline - time.monotonic())
        with self._lock:
            pending = self._stop_sent
        if pending is None:
            return ""
        sending, replaced = pending
        if not sending.done():
            await wait(self._node, sending, wait_s)
        answered = sending.done() and sending.exception() is None
        handle = sending.result() if answered else None
        if answered and handle.accepted:
            return ""
        with self._lock:  # a trajectory sent since has replaced what the stop was to replace: nothing to cancel
            current = self._stop_sent is pending
        if current:  # what the stop replaces may play on: ours are cancelled (the controller holds the arm there)
            self._cancel_live(replaced)
        if answered:
            return f"{self.target} refused the arm's stop: our trajectory was cancelled (the arm holds where it is)"
        if sending.done():
            return f"the arm's stop could not be sent to {self.target} ({sending.exception()}): our trajectory was " \
                "cancelled"  # fmt: skip
        return f"{self.target} did not answer the arm's stop within {wait_s:g} s: our trajectory was cancelled"

    def _stop_point(self, at: np.ndarray | None, velocity: np.ndarray | None,
                    log: Callable[[str], None]) -> JointTrajectoryPoint | None:  # fmt: skip
        """The stop ``hold`` sends (None, logged, when nothing says where the arm is)."""
        arm = self._arm_columns
        try:
            limits = self.limits()
        except EngineError as exc:  # a description changed since: the limits the goal ran with still bound the hold
            if self._known_limits is None:
                log(f"cannot hold on {self.target}: {exc.message}")
                return None
            limits = self._known_limits
        speeds, turns = np.array([lim.velocity for lim in limits])[arm], turning(limits)[arm]
        braking = np.array([lim.acceleration for lim in limits])[arm]
        lead = self._stop_lead()  # the arm plays on at its speed until the controller starts the stop
        try:  # the trajectory's joints only: a gripper on its own controller may report late, or not at all
            start, start_velocity = self.start_state(self.arm_names, lead)
            start_velocity = np.clip(start_velocity, -speeds, speeds)  # a spike of a differenced velocity
            if at is None:
                here, moving = start, start_velocity
            else:  # a wrist: the short way
                moving = _or_rest(velocity, arm)
                here = start + difference(at[arm] + moving * lead, start, turns)
            start_velocity = np.where(self.from_rest(self.arm_names), 0.0, start_velocity)  # as the controller starts
            distance, unknown, stale = np.abs(here - start), 0.0, False
        except EngineError as exc:
            if at is None:
                log(f"cannot hold on {self.target}: {exc.message}, and no plan says where the arm is")
                return None
            log(f"holding on {self.target} where the plan has the arm: {exc.message}")
            moving = start_velocity = _or_rest(velocity, arm)
            here = start = at[arm] + moving * lead
            distance = unknown = self.tolerances["max_tracking_error"][arm]  # where the arm is, within this
            stale = True
        braking_s = max(float(np.max(_braking_times(distance, moving, start_velocity, braking), initial=0.0)),
                        HOLD_MIN_S)  # fmt: skip
        lower, upper = (np.array([getattr(lim, side) for lim in limits])[arm] for side in ("lower", "upper"))
        # an arm already past a limit (jogged past a URDF's soft limit) is never moved onto it by a hold
        lower, upper = np.minimum(lower, here), np.maximum(upper, here)
        stop = np.clip(here + moving * braking_s / 2, lower, upper)  # steady deceleration to rest
        squeezed = (np.abs(stop - here) < np.abs(moving) * braking_s / 2 - 1e-12) & (moving != 0)
        slowest = max(float(np.max(1.5 * (distance + np.abs(stop - here)) / speeds, initial=0.0)), braking_s)
        if squeezed.any():  # a position limit within the braking distance: the steady deceleration from the start
            # state at v0 that ends on it (T = 2 d / v0: the gentlest that stays short of it, v0^2 / 2d; the cubic
            # passes it for T > 3 d / v0, so by 4 v0 MIN_STOP_S / 27 at most, 3 mrad at 1 rad/s, where the floor
            # lengthens T); every joint brakes in the shortest such T, the one that sets it onto its limit. Unread,
            # the arm is anywhere within its tracking error e of the plan: T = 3 (d - e) / v0, the longest with which
            # the cubic from e on stays short (d 0.2, e 0.1, v0 1: at most 13 rad/s^2 from e behind; 35 at 2 (d-e)/v0);
            # a limit nearer than e (the arm may be on it already): 3 d / v0, short of it from where the plan has it
            toward = np.sign(start_velocity) == np.sign(moving)
            room = np.maximum((stop - start) * np.sign(moving), 0.0)  # none: the arm is past it already
            room = np.where(room > unknown, room - unknown, room)
            with np.errstate(divide="ignore", invalid="ignore"):
                times = np.where(toward & (start_velocity != 0), (3 if stale else 2) * room / np.abs(start_velocity),
                                 np.inf)  # fmt: skip
            slowest = max(min(slowest, float(times[squeezed].min())), MIN_STOP_S)
            binding = squeezed & (times <= slowest)  # another squeezed joint stops short of its limit in this T
            stop = np.where(binding, stop, np.clip(here + moving * slowest / 2, lower, upper))
        return JointTrajectoryPoint(positions=stop.tolist(), velocities=[0.0] * len(arm),
                                    time_from_start=duration_of(slowest))  # fmt: skip

    def _on_stop(self, future: Future, replaced: set[bytes]) -> None:
        """The stop taken: it plays (never cancelled as stale: a cancel would jolt); refused, or lost: ours it was
        to replace are cancelled (the controller holds where the arm is)."""
        handle = future.result() if future.exception() is None else None
        if handle is None or not handle.accepted:
            self._node.get_logger().error(f"{self.target} refused the stop trajectory: cancelling ours instead")
            self._cancel_live(replaced)
            return
        key = _goal_id(handle)
        with self._lock:
            self._live[key] = handle
            self._stops.add(key)
        handle.get_result_async().add_done_callback(lambda f: self._on_result(handle, f.result()))
