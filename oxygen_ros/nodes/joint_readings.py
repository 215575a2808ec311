"""What the arm says of itself, as ros2_control publishes it: the joints' newest readings and the URDF's limits.

* `joint_states` (sensor_msgs/JointState, joint_state_broadcaster's): the newest position of each joint (and its
  velocity: the driver's, else one from its last two readings) and when it arrived on the node clock; a joint never
  heard of, or heard of longer than ``input_timeout_s`` ago, is a named FAILED_PRECONDITION, never a default.
* `robot_description` (std_msgs/String, latched by robot_state_publisher): the URDF whose limits bound every target
  (``control.arm.joint_limits``), tightened by the joint_*_limits parameters.
Both are read for every action joint at once, whichever controller plays it (``trajectory_controller``).
"""

import math
import threading

import numpy as np
from rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from oxygen_ros import bounds
from oxygen_ros.control.arm.joint_limits import JointLimit, joint_limits, urdf_limits
from oxygen_ros.control.arm.joint_map import JointMap
from oxygen_ros.control.arm.state_entries import MAX_SPEED, StateEntry, reported_velocities
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes.stamps import MAX_CLOCK_SKEW_S, NS, seconds

MIN_DIFFERENCE_S, MAX_DIFFERENCE_S = 5e-3, 0.5  # readings that far apart give a velocity where the driver gives none


def _difference_velocity(before: tuple[float, float, float, float], position: float, arrival: float,
                         stamp: float) -> float:  # fmt: skip
    """A joint's velocity from its reading ``before`` and this one (by their stamps, else their arrivals); NaN when
    they are too close in time or too far apart to tell (MAX_DIFFERENCE_S), or a wrap or a jump (over half a turn)."""
    then, dt = before[0], (stamp - before[3]) if stamp > 0 and before[3] > 0 else arrival - before[2]
    if not MIN_DIFFERENCE_S <= dt <= MAX_DIFFERENCE_S or abs(position - then) > math.pi:
        return math.nan
    return (position - then) / dt


def _behind(before: tuple[float, float, float, float], arrival: float, stamp: float) -> float:
    """How much older a reading is than the one stored ``before``: by their stamps where both have one (the order
    the driver sent them in), else by arrival."""
    return before[3] - stamp if stamp and before[3] else before[2] - arrival


class JointReadings:
    """The readings of the action joints ``names`` and the model's ``state`` entries; ``grippers``: the joints on
    a gripper's own controller (they report apart); ``limit_lists``: joint_lower / upper / velocity / acceleration
    limits per action joint (``arm_io.NUMBER_LISTS``)."""

    def __init__(self, node: Node, settings: dict, names: tuple[str, ...], state: tuple[StateEntry, ...],
                 grippers: tuple[str, ...], joint_map: JointMap, limit_lists: list[list[float]],
                 group: CallbackGroup) -> None:  # fmt: skip
        self._node, self._settings = node, settings
        self.names, self.state, self.map, self._grippers = names, state, joint_map, set(grippers)
        self._limit_lists = limit_lists
        self.starts_from_command = settings["controller_starts_from"] == "commanded"
        self._all_from_rest = settings["controller_starts_from"] == "measured_at_rest"
        self._wanted = set(names) | {entry.joint for entry in state}
        self._lock = threading.Lock()  # what the executor's callbacks and the goal's clock thread share
        self._joints: dict[str, tuple[float, float, float, float]] = {}  # joint -> (position, velocity (NaN: none),
        # arrival, stamp), seconds
        self._estimated: dict[str, float] = {}  # joint -> its reported velocity, else one from its last two readings
        self._described: dict[str, JointLimit] = {}
        self.known_limits: list[JointLimit] | None = None  # the last limits read: a hold's, if they cannot be now
        # one at a time, in order: an older reading handled last would replace a newer one, dated by its arrival
        node.create_subscription(JointState, settings["state_topic"], self._on_state, 10,
                                 callback_group=MutuallyExclusiveCallbackGroup())  # fmt: skip
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(String, settings["description_topic"], self._on_description, latched,
                                 callback_group=group)  # fmt: skip

    def now(self) -> float:
        return self._node.get_clock().now().nanoseconds / NS

    def _on_state(self, msg: JointState) -> None:
        if len(msg.name) > bounds.STATE or len(msg.position) != len(msg.name):
            self._node.get_logger().warning(f"ignoring a JointState with {len(msg.name)} names and "
                                            f"{len(msg.position)} positions", throttle_duration_sec=5.0)  # fmt: skip
            return
        arrival, stamp = self.now(), seconds(msg.header.stamp)
        velocities = reported_velocities(len(msg.name), msg.velocity)
        with self._lock:  # (beside the goal's clock thread) a reading stamped behind the newest, from another publisher
            # of the same joint, never replaces it
            for name, position, velocity in zip(msg.name, msg.position, velocities):
                if name in self._wanted and math.isfinite(position):  # only the joints we command or read: bounded
                    before = self._joints.get(name)
                    if before is not None and 0 < _behind(before, arrival, stamp) < MAX_DIFFERENCE_S:
                        continue  # (further behind: the clock went back, a simulator reset; the newest is all)
                    self._estimated[name] = velocity if before is None or math.isfinite(velocity) else \
                        _difference_velocity(before, position, arrival, stamp)  # fmt: skip
                    self._joints[name] = (position, velocity, arrival, stamp)

    def _on_description(self, msg: String) -> None:
        try:
            self._described = urdf_limits(msg.data)
        except EngineError as exc:
            self._node.get_logger().error(f"{exc.message}: keeping the limits had before")

    def limits(self) -> list[JointLimit]:
        """The action joints' limits now (FAILED_PRECONDITION naming a joint without any); the last known are kept
        for a hold (``known_limits``)."""
        self.known_limits = joint_limits(list(self.names), self._described, *self._limit_lists)
        return list(self.known_limits)

    def measured(self, names: tuple[str, ...]) -> np.ndarray:
        """The newest positions of ``names``; FAILED_PRECONDITION naming a joint never heard of, too old, or stamped
        on another clock (a driver on wall time under use_sim_time, or the reverse: its trajectories would be
        stamped in another era)."""
        return self._read(names)[:, 0]

    def reading(self, names: tuple[str, ...]) -> tuple[np.ndarray, float]:
        """``measured`` and when the oldest of its arm positions arrived (node clock, s; a gripper's aside): what a
        plan is compared with is where it had the arm then."""
        readings = self._read(names)
        return readings[:, 0], self._arm_read_at(names, readings)

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
        return self.no_velocity(names)

    def no_velocity(self, names: tuple[str, ...]) -> np.ndarray:
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

    def snapshot(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(the state the model reads: ``state_joint_names``' positions and velocities, an action joint's in the
        model's units; the action joints in the model's units: a delta chunk's origin; when the model saw the arm, as
        ``reading`` dates it), from one read: a JointState arriving meanwhile cannot give the origin another instant
        than the state. FAILED_PRECONDITION naming a velocity the joint states do not carry."""
        joints = tuple(dict.fromkeys([entry.joint for entry in self.state] + list(self.names)))
        readings = self._read(joints)
        row = {name: i for i, name in enumerate(joints)}
        index = {name: i for i, name in enumerate(self.names)}
        state = []
        for entry in self.state:
            position, velocity, _ = readings[row[entry.joint]]
            if entry.velocity and not math.isfinite(velocity):
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"state entry {entry.name}: the joint states carry "
                                  f"no velocity for joint {entry.joint} (or one over {MAX_SPEED:g})")  # fmt: skip
            i = index.get(entry.joint)
            if entry.velocity:
                state.append(velocity if i is None else velocity / self.map.scale[i])
            else:
                state.append(position if i is None else (position - self.map.offset[i]) / self.map.scale[i])
        actions = readings[[row[name] for name in self.names]]
        return np.array(state), self.map.to_model(actions[:, 0]), self._arm_read_at(self.names, actions)

    def _arm_read_at(self, names: tuple[str, ...], readings: np.ndarray) -> float:
        """When the oldest of the arm's readings among ``names`` (rows of ``readings``) arrived: a gripper on its own
        controller, and a joint the model only reads (a torso on another driver), report apart from the arm."""
        arm = [i for i, name in enumerate(names) if name not in self._grippers] or list(range(len(names)))
        return float(readings[arm, 2].min())
