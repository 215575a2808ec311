"""Rigid transforms (translation + unit quaternion) and their algebra, in plain Python: what a TF lookup returns and
what a node applies to a pose. A transform maps points of its child frame into its parent frame, as
geometry_msgs/TransformStamped does (header.frame_id = parent)."""

import math
from dataclasses import dataclass

from geometry_msgs.msg import Pose, Transform

Vector = tuple[float, float, float]
Quaternion = tuple[float, float, float, float]  # x, y, z, w


def _multiply(a: Quaternion, b: Quaternion) -> Quaternion:
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def _rotate(q: Quaternion, v: Vector) -> Vector:
    x, y, z, _ = _multiply(_multiply(q, (*v, 0.0)), (-q[0], -q[1], -q[2], q[3]))
    return x, y, z


@dataclass(frozen=True)
class Rigid:
    translation: Vector = (0.0, 0.0, 0.0)
    rotation: Quaternion = (0.0, 0.0, 0.0, 1.0)

    def __mul__(self, other: "Rigid") -> "Rigid":
        """``a * b``: first ``b`` (child -> middle), then ``a`` (middle -> parent)."""
        moved = _rotate(self.rotation, other.translation)
        translation = tuple(t + m for t, m in zip(self.translation, moved))
        return Rigid(translation, _multiply(self.rotation, other.rotation))  # type: ignore[arg-type]

    def inverse(self) -> "Rigid":
        x, y, z, w = self.rotation
        back = (-x, -y, -z, w)
        tx, ty, tz = _rotate(back, self.translation)
        return Rigid((-tx, -ty, -tz), back)

    def apply(self, point: Vector) -> Vector:
        moved = _rotate(self.rotation, point)
        return moved[0] + self.translation[0], moved[1] + self.translation[1], moved[2] + self.translation[2]

    @property
    def yaw(self) -> float:
        """Rotation about z (of a planar transform; the heading of a pose)."""
        x, y, z, w = self.rotation
        return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))

    def to_msg(self) -> Transform:
        out = Transform()
        out.translation.x, out.translation.y, out.translation.z = self.translation
        out.rotation.x, out.rotation.y, out.rotation.z, out.rotation.w = self.rotation
        return out


def of_transform(msg: Transform) -> Rigid:
    t, q = msg.translation, msg.rotation
    return Rigid((t.x, t.y, t.z), (q.x, q.y, q.z, q.w))


def of_pose(msg: Pose) -> Rigid:
    """A pose as the transform from the posed body's frame to the pose's frame."""
    p, q = msg.position, msg.orientation
    return Rigid((p.x, p.y, p.z), (q.x, q.y, q.z, q.w))


def unit_rotation(rigid: Rigid, what: str) -> Rigid:
    """``rigid`` with its quaternion normalized; ValueError naming ``what`` when it is not within 1% of unit length
    (all zeros, a driver's garbage, NaN): no rotation to trust, and a yaw read off it would be wrong."""
    norm2 = sum(v * v for v in rigid.rotation)
    if not abs(norm2 - 1.0) <= 0.01:
        raise ValueError(f"{what} has a non-unit quaternion {rigid.rotation}")
    return Rigid(rigid.translation, tuple(v / math.sqrt(norm2) for v in rigid.rotation))  # type: ignore[arg-type]


def planar(x: float, y: float, yaw: float, z: float = 0.0) -> Rigid:
    return Rigid((x, y, z), (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)))


def interpolate(a: Rigid, b: Rigid, fraction: float) -> Rigid:
    """Linear in translation, spherical (shortest arc) in rotation, as tf2 interpolates between two samples."""
    translation = tuple(p + fraction * (q - p) for p, q in zip(a.translation, b.translation))
    qa, qb = a.rotation, b.rotation
    dot = sum(p * q for p, q in zip(qa, qb))
    if dot < 0.0:  # the same rotation the short way round
        qb, dot = tuple(-q for q in qb), -dot
    if dot > 0.9995:  # nearly equal: slerp's division is ill-conditioned, a normalised lerp is exact enough
        weights = (1.0 - fraction, fraction)
    else:
        angle = math.acos(dot)
        weights = (math.sin((1.0 - fraction) * angle) / math.sin(angle), math.sin(fraction * angle) / math.sin(angle))
    q = tuple(weights[0] * p + weights[1] * r for p, r in zip(qa, qb))
    norm = math.sqrt(sum(v * v for v in q))
    return Rigid(translation, tuple(v / norm for v in q))  # type: ignore[arg-type]
