"""Playing a joint trajectory as ros2_control's joint_trajectory_controller (JTC) plays one, without ROS, so the
simulated arm (``oxygen_ros.nodes.arm_sim``) and the tests share one definition of where the arm is at any time and
of which trajectories a real controller would refuse.

Where the arm is (JTC's ``Trajectory::sample``): from the state at acceptance, at the acceptance time, to the first
point at start + its time_from_start, then from point to point, holding the last point once its time has passed.
``start`` is the trajectory's header stamp, or the acceptance time when that stamp is zero ("start now"). JTC's
spline: straight lines when the points carry positions only; cubic (Hermite) segments when every point carries
velocities too, the first one from the state at acceptance, its velocity included (so a trajectory replacing a
moving one bends away from that motion instead of turning at once), except where the controller reads no velocity
(its ``state_interfaces`` lack it): then the first segment is a straight line from the position at acceptance, as
``Trajectory::interpolate_between_points`` plays two states of which one has no velocity (a step in velocity at
either end); accelerations, where given, are checked but not followed (JTC would play quintic segments).

What is refused (JTC's ``validate_trajectory_msg`` with its default parameters: no partial-joint goals, no non-zero
velocity at the end, no integration, a position command interface only, so no effort field), with JTC's own words:
not exactly the controller's joints (any order: the positions are mapped by name), no points, a point whose
positions (or given velocities, accelerations) are not one per joint, times not strictly increasing, a moving last
point, and a non-zero start stamp whose last point is already in the past. Three rules are ours, stricter than JTC:
a cap on joints and points checked before anything is sized by the message (``oversized``), a joint named twice
(JTC would accept it as long as the count matches) and a non-finite position.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from oxygen_ros.bounds import PREVIEW_CHARS

MAX_JOINTS = 64  # names per trajectory (a humanoid has ~40)
MAX_POINTS = 10_000  # points per trajectory: 100 s at 100 Hz, far beyond a VLA's chunk of ~50
END_VELOCITY_EPSILON = float(np.finfo(np.float32).eps)  # JTC: std::numeric_limits<float>::epsilon()


@dataclass(frozen=True)
class Point:
    """A trajectory point as received: its time from the trajectory's start (s) and its fields, one value per joint
    in the trajectory's own name order (velocities, accelerations and effort may be empty)."""

    time_s: float
    positions: Sequence[float]
    velocities: Sequence[float] = ()
    accelerations: Sequence[float] = ()
    effort: Sequence[float] = ()


def oversized(joints: int, points: int) -> str | None:
    """Why a trajectory of this size is refused before any of it is read, or None."""
    if joints > MAX_JOINTS:
        return f"The trajectory names {joints} joints, more than the bound of {MAX_JOINTS}."
    if points > MAX_POINTS:
        return f"The trajectory has {points} points, more than the bound of {MAX_POINTS}."
    return None


def rejection(
    controller_joints: Sequence[str], joint_names: Sequence[str], points: Sequence[Point], stamp_s: float, now_s: float
) -> str | None:
    """Why a controller of ``controller_joints`` refuses this trajectory (the first rule broken), or None to play it.
    ``stamp_s``: its header stamp (0 = start now); ``now_s``: the controller's clock (same epoch)."""
    reason = oversized(len(joint_names), len(points))
    if reason:
        return reason
    if len(joint_names) != len(controller_joints):
        return (f"Joints on incoming trajectory don't match the controller joints: {len(joint_names)} named, the "
                f"controller has {len(controller_joints)} ({', '.join(controller_joints)}).")  # fmt: skip
    if not points:
        return "Empty trajectory received."
    known, seen = set(controller_joints), set()
    for name in joint_names:
        if name not in known:
            return f"Incoming joint {_quoted(name)} doesn't match the controller's joints."
        if name in seen:
            return f"Incoming joint {name!r} is named twice."
        seen.add(name)
    for i, point in enumerate(points):
        if i > 0 and point.time_s <= points[i - 1].time_s:
            return (f"Time between points {i - 1} and {i} is not strictly increasing, it is "
                    f"{points[i - 1].time_s:f} and {point.time_s:f} respectively")  # fmt: skip
        reason = _point_fields(i, point, joint_names)
        if reason:
            return reason
    for name, velocity in zip(joint_names, points[-1].velocities):  # empty, or one per joint (checked above)
        if abs(velocity) > END_VELOCITY_EPSILON:
            return f"Velocity of last trajectory point of joint {name} is not zero: {velocity:.15f}"
    end_s = stamp_s + points[-1].time_s
    if stamp_s != 0.0 and end_s < now_s:
        return f"Received trajectory with non-zero start time ({stamp_s:f}) that ends in the past ({end_s:f})"
    return None


def _quoted(name: str) -> str:
    """An unknown name as the reason shows it: quoted, an over-long one cut short."""
    return repr(name[:PREVIEW_CHARS]) + ("..." if len(name) > PREVIEW_CHARS else "")


def _point_fields(i: int, point: Point, joint_names: Sequence[str]) -> str | None:
    """Why point ``i``'s fields are refused: sizes (velocities and accelerations may be empty), effort, non-finite."""
    for field, values, may_be_empty in (("positions", point.positions, False), ("velocities", point.velocities, True),
                                        ("accelerations", point.accelerations, True)):  # fmt: skip
        if len(values) != len(joint_names) and not (may_be_empty and len(values) == 0):
            return (f"Mismatch between joint_names size ({len(joint_names)}) and {field} ({len(values)}) "
                    f"at point #{i}.")  # fmt: skip
    if len(point.effort):
        return (
            "Trajectories with effort fields are only supported for controllers using the 'effort' command interface."
        )
    for name, position in zip(joint_names, point.positions, strict=True):
        if not math.isfinite(position):
            return f"Position of joint {name} at point #{i} is not finite: {position}"
    return None


@dataclass(frozen=True)
class Trajectory:
    """A trajectory being played, in the controller's joint order: ``positions[k]`` is reached at
    ``start_s + times_s[k]``; before the first point the arm moves from ``before``, where it was at ``before_s``."""

    before_s: float
    before: np.ndarray  # [J]
    start_s: float
    times_s: np.ndarray  # [n], strictly increasing
    positions: np.ndarray  # [n, J]
    velocities: np.ndarray | None = None  # [n, J] where every point gives them: cubic segments
    before_velocity: np.ndarray | None = None  # [J] the state's at acceptance; None: none read (a straight line)

    @classmethod
    def accepted(
        cls, controller_joints: Sequence[str], joint_names: Sequence[str], points: Sequence[Point], stamp_s: float,
        now_s: float, current: np.ndarray, current_velocity: np.ndarray | None = None, reads_velocity: bool = True,
    ) -> "Trajectory":  # fmt: skip
        """A trajectory ``rejection`` passed, accepted at ``now_s`` with the arm at ``current``, moving at
        ``current_velocity`` (None: at rest); ``reads_velocity`` False: the controller has no velocity state, so the
        first segment is a straight line whatever the arm does."""
        column = {name: j for j, name in enumerate(joint_names)}
        order = [column[name] for name in controller_joints]
        positions = np.array([point.positions for point in points], dtype=np.float64)[:, order]
        times = np.array([point.time_s for point in points], dtype=np.float64)
        velocities = None
        if all(len(point.velocities) == len(joint_names) for point in points):
            velocities = np.array([point.velocities for point in points], dtype=np.float64)[:, order]
        here = np.array(current, dtype=np.float64)
        moving = np.zeros_like(here) if current_velocity is None else np.array(current_velocity, dtype=np.float64)
        return cls(now_s, here, stamp_s or now_s, times, positions, velocities, moving if reads_velocity else None)

    @classmethod
    def hold(cls, positions: np.ndarray, now_s: float) -> "Trajectory":
        """Stay at ``positions`` (JTC's hold: one point, reached at once)."""
        here = np.array(positions, dtype=np.float64)
        return cls(now_s, here, now_s, np.zeros(1), here[None, :])

    @property
    def end_s(self) -> float:
        return self.start_s + float(self.times_s[-1])

    def index(self, t: float) -> int:
        """JTC's feedback index at ``t``, the point being moved towards: 0 before the first point, k + 1 between
        points k and k + 1, the number of points once the last one's time has passed (the trajectory is done)."""
        return int(np.searchsorted(self.times_s, t - self.start_s, side="right"))

    def done(self, t: float) -> bool:
        return self.index(t) == len(self.times_s)

    def sample(self, t: float) -> np.ndarray:
        """The positions at ``t`` (node clock seconds); ``before`` at any time up to ``before_s``."""
        return self._state(t)[0]

    def velocity(self, t: float) -> np.ndarray:
        """The velocities at ``t``: the spline's slope (up to ``before_s`` the state's at acceptance; 0 once the
        last point is held)."""
        return self._state(t)[1]

    def _state(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        k, r = self.index(t), t - self.start_s
        if k == len(self.times_s):
            return self.positions[-1].copy(), np.zeros_like(self.before)
        if k == 0:
            r0, p0, v0 = self.before_s - self.start_s, self.before, self.before_velocity
        else:
            r0, p0 = float(self.times_s[k - 1]), self.positions[k - 1]
            v0 = self.velocities[k - 1] if self.velocities is not None else None
        if r <= r0:  # at a point (or before acceptance): its own velocity where the spline has one
            return p0.copy(), np.zeros_like(p0) if v0 is None else v0.copy()
        h, p1 = float(self.times_s[k]) - r0, self.positions[k]
        s = (r - r0) / h
        if self.velocities is None or v0 is None:  # (JTC: a velocity missing at either end: a straight line)
            return p0 + (p1 - p0) * s, (p1 - p0) / h
        m0, m1 = v0 * h, self.velocities[k] * h  # Hermite tangents per unit s
        position = (2 * s**3 - 3 * s**2 + 1) * p0 + (s**3 - 2 * s**2 + s) * m0 + (-2 * s**3 + 3 * s**2) * p1 \
            + (s**3 - s**2) * m1  # fmt: skip
        slope = (6 * s**2 - 6 * s) * (p0 - p1) + (3 * s**2 - 4 * s + 1) * m0 + (3 * s**2 - 2 * s) * m1
        return position, slope / h
