"""What the arm may be told: joint targets checked against the limits and the arm's state before anything moves.

A model's target a little past a position limit (within ``margin``: rounding, a blended step) is clamped onto it; one
further out is refused, as is anything not finite, a first target more than ``max_jump`` from where the plan starts
(the measured position for an arm at rest: a stale or wrong state, a chunk from another pose), and any segment whose
peak speed exceeds the joint's velocity limit, or whose peak acceleration its acceleration limit where one is set. The
peaks are the real ones: a joint_trajectory_controller given positions and velocities plays cubic segments, whose
speed peaks above the segment's average, so the velocities sent are monotone (Fritsch-Carlson: zero at a turn and on a
limit, so no segment overshoots a target or a limit) and each segment's cubic is checked at its fastest (its
acceleration is linear in time: hardest at an end). A plan ends at rest; where stopping within its last period would
break a limit, the last target's time is pushed out until the stop fits (``_stopping_in_limits``). The first segment
starts from ``anchor``, at rest or at the plan's velocity there; ``check_moving_start`` checks it again from where a
controller that starts a new trajectory from its measured state is, moving. Such a start's tangent is not monotone:
entering fast towards a target on a limit, its cubic bulges past the limit, so every segment's position extremes are
checked too (refused when it passes a limit by more than ``margin``, at most MAX_OVERSHOOT, beyond its own ends: the
few mrad of an arm settling onto a limit as the next chunk comes pass, the tens of one entering at speed do not). A
refusal is an OUT_OF_RANGE error naming the joint, the step and the numbers; the caller holds the arm. The checks only
ever narrow what the model asked for: clamping moves a target inside the limits, never past them, and no check widens
a limit; a stop given more time reaches its target later, never elsewhere.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from oxygen_ros.control.arm.joint_limits import JointLimit
from oxygen_ros.errors import EngineError, ErrorCode


# The last target's time may be pushed out, this much longer a step, until its period is this long (or its own period,
# if longer), so that the arm's stop there fits the limits
STOP_STRETCH_STEP = 1.05
MAX_STOP_S = 1.0
# A segment's cubic may pass a position limit by at most this (rad or m), however wide limit_margin is set: a margin
# widened so that model targets further out are clamped must not let the controller's spline run further past a limit
# (an arm settling onto a limit as the next chunk comes bulges up to ~13 mrad at 20 rad/s^2)
MAX_OVERSHOOT = 0.02


@dataclass(frozen=True)
class SafeTargets:
    positions: np.ndarray  # [n, J], inside the limits
    velocities: np.ndarray  # [n, J], monotone, the last row 0 (a joint_trajectory_controller refuses a moving end)
    times: np.ndarray  # [n] seconds from now: as given, the last one later where the stop needs it
    clamped: int  # targets moved onto a limit
    margin: np.ndarray | float = 0.0  # [J] the limit_margin they were checked with: how far a cubic may bulge past


def _refuse(message: str) -> EngineError:
    return EngineError(ErrorCode.OUT_OF_RANGE, message)


def check_targets(targets: np.ndarray, times: np.ndarray, anchor: np.ndarray, names: tuple[str, ...],
                  limits: list[JointLimit], margin: np.ndarray | float, max_jump: np.ndarray | float,
                  anchor_velocity: np.ndarray | None = None) -> SafeTargets:  # fmt: skip
    """``targets`` [n, J] due at ``times`` [n] seconds from now (increasing, > 0), the plan starting at ``anchor``
    [J] now, at rest or moving at ``anchor_velocity`` [J] (the plan's own velocity there: a steady motion is
    checked as one, not as a start from rest); ``margin`` and ``max_jump`` per joint [J] (rad or m) or for all."""
    margin, max_jump = (np.broadcast_to(np.asarray(v, dtype=np.float64), anchor.shape) for v in (margin, max_jump))
    if not np.isfinite(targets).all():
        step, joint = np.argwhere(~np.isfinite(targets))[0]
        raise _refuse(f"joint {names[joint]}: target {targets[step, joint]} at step {step} is not a number")
    lower = np.array([lim.lower for lim in limits])
    upper = np.array([lim.upper for lim in limits])
    beyond = (targets < lower - margin) | (targets > upper + margin)
    if beyond.any():
        step, joint = np.argwhere(beyond)[0]
        raise _refuse(f"joint {names[joint]}: target {targets[step, joint]:.4f} at step {step} is beyond its limits "
                      f"[{lower[joint]:.4f}, {upper[joint]:.4f}] by more than limit_margin "
                      f"{margin[joint]:g}")  # fmt: skip
    clamped = np.clip(targets, lower, upper)
    jump = np.abs(clamped[0] - anchor)
    if (jump > max_jump).any():
        joint = int(np.argmax(jump))
        raise _refuse(f"joint {names[joint]}: the first target {clamped[0, joint]:.4f} is {jump[joint]:.4f} from "
                      f"where the arm starts, {anchor[joint]:.4f}, over max_start_jump "
                      f"{max_jump[joint]:g}")  # fmt: skip
    on_limit = (clamped == lower) | (clamped == upper)
    path, pinned = np.vstack([anchor, clamped]), np.vstack([np.zeros_like(anchor, dtype=bool), on_limit])
    at, velocities = _stopping_in_limits(path, np.concatenate([[0.0], times]), pinned, anchor_velocity, limits)
    _check_segments(path, velocities, at, names, limits, margin, lambda step: f"step {step}")
    return SafeTargets(clamped, velocities[1:], at[1:], int((clamped != targets).sum()), margin)


def _stopping_in_limits(path: np.ndarray, at: np.ndarray, pinned: np.ndarray, anchor_velocity: np.ndarray | None,
                        limits: list[JointLimit]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The times and velocities the controller gets: the plan ends at rest, so a chunk cut off mid-motion stops
    within its last period, which at speed takes more than the limits allow (a steady 75% of the velocity limit
    peaks at it; the deceleration is 4 v / period). Its last target's time is pushed out, a step at a time up to
    MAX_STOP_S, until the whole plan fits (the next chunk usually replaces the stop before it plays); if none does
    (a stop at the last target needs more room than one period's travel at this speed), the times stay and the
    check refuses the plan."""
    velocity = np.array([lim.velocity for lim in limits])
    acceleration = np.array([lim.acceleration for lim in limits])

    def ending_after(last_period: float) -> tuple[np.ndarray, np.ndarray, bool]:
        stretched = np.concatenate([at[:-1], [at[-2] + last_period]])
        velocities = _with_anchor(_monotone_velocities(path, stretched, pinned), anchor_velocity)
        plan = (path, velocities, stretched)  # the segment before the stop changes too (the tangent between them)
        return stretched, velocities, bool((_peak_speeds(*plan) <= velocity).all()
                                           and (_peak_accelerations(*plan) <= acceleration).all())  # fmt: skip

    period = last_period = at[-1] - at[-2]
    as_given = tried = ending_after(period)
    while not tried[2]:
        last_period *= STOP_STRETCH_STEP
        if last_period > max(MAX_STOP_S, period):
            return as_given[:2]
        tried = ending_after(last_period)
    return tried[:2]


def _with_anchor(velocities: np.ndarray, anchor_velocity: np.ndarray | None) -> np.ndarray:
    if anchor_velocity is not None:
        velocities[0] = anchor_velocity
    return velocities


def check_moving_start(safe: SafeTargets, first_s: float, start: np.ndarray, velocity: np.ndarray,
                       names: tuple[str, ...], limits: list[JointLimit]) -> None:  # fmt: skip
    """The first segment of ``safe`` as a controller plays it from a moving state: from ``start`` [J] at
    ``velocity`` [J] to the first target ``first_s`` seconds ahead, at the velocity sent with it; refused over a
    joint's velocity limit, naming the start."""
    path, velocities = np.vstack([start, safe.positions[0]]), np.vstack([velocity, safe.velocities[0]])
    _check_segments(path, velocities, np.array([0.0, first_s]), names, limits, safe.margin,
                    lambda joint: f"the first segment from {start[joint]:.4f} at {velocity[joint]:.3f}/s (where the "
                                  "controller starts it)", per_joint=True)  # fmt: skip


def _check_segments(path: np.ndarray, velocities: np.ndarray, times: np.ndarray, names: tuple[str, ...],
                    limits: list[JointLimit], margin: np.ndarray | float, where: Callable[[int], str],
                    per_joint: bool = False) -> None:  # fmt: skip
    """Refuse the first segment whose cubic moves faster, or accelerates harder, than its joint's limits, or passes
    a position limit by more than ``margin`` [J] beyond its own ends (a first segment entering at speed towards a
    limit it stops on bulges past it: the tangents there are not monotone; a few mrad as an arm settling onto a
    limit takes the next chunk, tens at speed); ``where`` names the segment (given its step, or with ``per_joint``
    its joint)."""
    lower, upper = np.array([lim.lower for lim in limits]), np.array([lim.upper for lim in limits])
    margin = np.broadcast_to(np.asarray(margin, dtype=np.float64), lower.shape)
    # capped where the controller plays the spline; a jaw on its own controller (its speed limits lifted) is not
    margin = np.where(np.isfinite([lim.velocity for lim in limits]), np.minimum(margin, MAX_OVERSHOOT), margin)
    ends_low, ends_high = np.minimum(path[:-1], path[1:]), np.maximum(path[:-1], path[1:])
    low, high = _position_extremes(path, velocities, times, ends_low, ends_high)
    for side, bound, past in (("lower", lower, np.minimum(ends_low, lower) - low),
                              ("upper", upper, high - np.maximum(ends_high, upper))):  # fmt: skip
        over = past > margin
        if over.any():
            step, joint = np.argwhere(over)[0]
            raise _refuse(f"joint {names[joint]}: {where(joint if per_joint else step)} would pass its {side} "
                          f"position limit {bound[joint]:.4f} by {past[step, joint]:.4f}, more than {margin[joint]:g} "
                          f"(limit_margin, at most {MAX_OVERSHOOT:g}: the controller's cubic overshoots there)")  # fmt: skip
    for kind, unit, limit, peak, bound in (
        ("move", "/s", "velocity", _peak_speeds(path, velocities, times), [lim.velocity for lim in limits]),
        ("accelerate", "/s^2", "acceleration", _peak_accelerations(path, velocities, times),
         [lim.acceleration for lim in limits]),
    ):  # fmt: skip
        over = peak > np.array(bound)
        if over.any():
            step, joint = np.argwhere(over)[0]
            raise _refuse(f"joint {names[joint]}: {where(joint if per_joint else step)} would {kind} at up to "
                          f"{peak[step, joint]:.3f}{unit}, over its {limit} limit {bound[joint]}")  # fmt: skip


def _monotone_velocities(path: np.ndarray, times: np.ndarray, pinned: np.ndarray) -> np.ndarray:
    """Fritsch-Carlson tangents [m, J] of the points ``path`` at ``times``: the harmonic mean of the two slopes
    around a point where they agree in sign, zero at a turn, at the ends and where ``pinned`` (on a limit)."""
    slopes = np.diff(path, axis=0) / np.diff(times)[:, None]
    out = np.zeros_like(path, dtype=np.float64)
    left, right = slopes[:-1], slopes[1:]
    same = left * right > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        out[1:-1] = np.where(same, 2.0 / (1.0 / np.where(same, left, 1.0) + 1.0 / np.where(same, right, 1.0)), 0.0)
    out[pinned] = 0.0
    return out


def _cubic(path: np.ndarray, velocities: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each cubic Hermite segment between consecutive points (the controller's spline with positions and velocities
    given) as dp/ds = a s^2 + b s + c over s in [0, 1]: (a, b, c, dt) [m - 1, J]."""
    dt = np.diff(times)[:, None]
    p0, p1, v0, v1 = path[:-1], path[1:], velocities[:-1] * dt, velocities[1:] * dt  # tangents per unit s
    return 6 * (p0 - p1) + 3 * (v0 + v1), 6 * (p1 - p0) - 4 * v0 - 2 * v1, v0, dt


def _position_extremes(path: np.ndarray, velocities: np.ndarray, times: np.ndarray, low: np.ndarray,
                       high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The lowest and highest position [m - 1, J] of each segment (``_cubic``): at an end (``low`` / ``high``, its
    ends' lower and higher) or where dp/ds is 0."""
    a, b, c, _ = _cubic(path, velocities, times)
    real = b * b - 4 * a * c >= 0
    root = np.sqrt(np.where(real, b * b - 4 * a * c, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        for s, exists in (((-b - root) / (2 * a), real & (a != 0)), ((-b + root) / (2 * a), real & (a != 0)),
                          (-c / b, (a == 0) & (b != 0))):  # fmt: skip
            inside = exists & (s > 0) & (s < 1)
            s = np.where(inside, s, 0.0)
            at = path[:-1] + ((a / 3 * s + b / 2) * s + c) * s
            low, high = np.where(inside, np.minimum(low, at), low), np.where(inside, np.maximum(high, at), high)
    return low, high


def _peak_accelerations(path: np.ndarray, velocities: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The hardest acceleration [m - 1, J] of each segment: d2p/ds2 = 2 a s + b is linear in s, so at an end."""
    a, b, _, dt = _cubic(path, velocities, times)
    return np.maximum(np.abs(b), np.abs(2 * a + b)) / (dt * dt)


def _peak_speeds(path: np.ndarray, velocities: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The fastest speed [m - 1, J] of each segment (``_cubic``): at an end or at the vertex of dp/ds."""
    a, b, c, dt = _cubic(path, velocities, times)
    peak = np.maximum(np.abs(c), np.abs(a + b + c))
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(a != 0, -b / (2 * a), -1.0)
    inside = (s > 0) & (s < 1)
    vertex = np.abs(a * s * s + b * s + c)
    peak = np.where(inside, np.maximum(peak, vertex), peak)
    return peak / dt
