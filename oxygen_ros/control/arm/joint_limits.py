"""Joint limits from the robot's URDF (the `robot_description` robot_state_publisher latches), tightened by parameters.

Parsed with urdf_parser_py (urdfdom-py), not by hand. A revolute or prismatic joint's `<limit lower upper velocity>`
bounds its position and speed; a continuous joint has no position bounds (urdf_parser_py reads its absent lower /
upper as 0, which must not become a 0..0 range) but keeps its velocity; fixed, floating, planar and mimic joints are
never commanded. A `<safety_controller soft_lower_limit soft_upper_limit>` inside the hard limits narrows them (a
UR description with safety_limits, a PR2's: the robot's own safety pushes back from there). Parameters may only
tighten what the URDF says, never widen it: a model's chunk must not move an arm further or faster than its
description allows.
"""

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from lxml import etree
from urdf_parser_py import xml_reflection
from urdf_parser_py.urdf import URDF
from urdf_parser_py.xml_reflection.core import Path

from oxygen_ros.errors import EngineError, ErrorCode

MAX_DESCRIPTION_BYTES = 8 << 20  # a URDF with meshes inlined is a few MB at most
BOUNDED_TYPES = ("revolute", "prismatic")


@dataclass(frozen=True)
class JointLimit:
    lower: float  # rad or m; -inf where the joint turns freely
    upper: float
    velocity: float  # rad/s or m/s, > 0
    acceleration: float = math.inf  # rad/s^2 or m/s^2, > 0; a URDF has none: inf unless a parameter sets one

    def tightened(self, lower: float, upper: float, velocity: float, acceleration: float = math.nan) -> "JointLimit":
        """These limits, narrowed by any finite value given (NaN = keep); never widened."""
        return JointLimit(_narrower(self.lower, lower, max), _narrower(self.upper, upper, min),
                          _narrower(self.velocity, velocity, min),
                          _narrower(self.acceleration, acceleration, min))  # fmt: skip


def _narrower(mine: float, given: float, pick: Callable[[float, float], float]) -> float:
    return mine if math.isnan(given) else pick(mine, given)


def urdf_limits(description: str) -> dict[str, JointLimit]:
    """Every commandable joint of a URDF with its limits; INVALID_ARGUMENT for a description that does not parse."""
    data = description.encode()  # lxml refuses a str that declares its encoding
    if len(data) > MAX_DESCRIPTION_BYTES:
        raise EngineError(ErrorCode.OUT_OF_RANGE, f"robot_description has {len(data)} bytes, over {MAX_DESCRIPTION_BYTES}")
    try:
        # no entities, no DTDs, no network: a description names joints and links, it never includes files
        node = etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False))
        with _quiet_reflection():  # unknown tags (<ros2_control>, <gazebo>) are not errors here
            robot = URDF.from_xml(node, Path(URDF.XML_REFL.tag, tree=etree.ElementTree(node)))
    except Exception as exc:  # lxml and urdf_parser_py raise many types for a malformed document
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"robot_description does not parse: {exc}") from exc
    soft, out = _soft_limits(node), {}
    for joint in robot.joints:
        if joint.mimic is not None or joint.limit is None or joint.type not in (*BOUNDED_TYPES, "continuous"):
            continue
        if joint.type not in BOUNDED_TYPES:
            out[joint.name] = JointLimit(-math.inf, math.inf, float(joint.limit.velocity))
            continue
        lower, upper = float(joint.limit.lower), float(joint.limit.upper)
        soft_lower, soft_upper = soft.get(joint.name, (lower, upper))
        if max(lower, soft_lower) < min(upper, soft_upper):  # (a soft range outside the hard one narrows nothing)
            lower, upper = max(lower, soft_lower), min(upper, soft_upper)
        out[joint.name] = JointLimit(lower, upper, float(joint.limit.velocity))
    return out


def _soft_limits(root: etree._Element) -> dict[str, tuple[float, float]]:
    """Per joint, its safety_controller's soft lower and upper limits, where it gives both as finite numbers
    (urdf_parser_py reads an absent one as 0, which must not become a bound)."""
    out = {}
    for joint in root.findall("joint"):
        safety = joint.find("safety_controller")
        if safety is None:
            continue
        try:
            soft = float(safety.get("soft_lower_limit", "nan")), float(safety.get("soft_upper_limit", "nan"))
        except ValueError:  # (urdf_parser_py refuses the description first)
            continue
        if all(math.isfinite(v) for v in soft):
            out[joint.get("name", "")] = soft
    return out


@contextmanager
def _quiet_reflection() -> Iterator[None]:
    """urdf_parser_py reports what it does not know on stderr through a module global: off while parsing."""
    saved = xml_reflection.core.on_error
    xml_reflection.core.on_error = lambda _message: None
    try:
        yield
    finally:
        xml_reflection.core.on_error = saved


def joint_limits(names: list[str], described: dict[str, JointLimit], lower: list[float], upper: list[float],
                 velocity: list[float], acceleration: list[float]) -> list[JointLimit]:  # fmt: skip
    """The limits of ``names``, in order: the description's (URDF) tightened by the per-joint parameter lists (each
    empty or one value per name, NaN = keep). A joint with no position or velocity limit from either source, or
    limits that leave no room, is FAILED_PRECONDITION naming it: an arm is never commanded without bounds. An
    acceleration limit (MoveIt's joint_limits.yaml has them; a URDF does not) only comes from its parameter."""
    for label, values in (("joint_lower_limits", lower), ("joint_upper_limits", upper),
                          ("joint_velocity_limits", velocity),
                          ("joint_acceleration_limits", acceleration)):  # fmt: skip
        if values and len(values) != len(names):
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{label} has {len(values)} values for {len(names)} joints")
    out = []
    for i, name in enumerate(names):
        given = [values[i] if values else math.nan for values in (lower, upper, velocity, acceleration)]
        base = described.get(name)
        if base is None:
            if any(math.isnan(v) for v in given[:3]):
                raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: no limits in robot_description and "
                                  "not all of joint_lower_limits, joint_upper_limits, joint_velocity_limits set")  # fmt: skip
            base = JointLimit(-math.inf, math.inf, math.inf)
        limit = base.tightened(*given)
        turns_freely = base.lower == -math.inf and base.upper == math.inf and name in described
        if turns_freely and math.isfinite(limit.lower) != math.isfinite(limit.upper):
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: a continuous joint is bounded by "
                              "joint_lower_limits and joint_upper_limits together or not at all (with one, it neither "
                              "turns freely nor stays in a range)")  # fmt: skip
        if not turns_freely and not (math.isfinite(limit.lower) and math.isfinite(limit.upper)):
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: position limits {limit.lower}, "
                              f"{limit.upper} must be finite (only a continuous joint turns freely)")  # fmt: skip
        if not (limit.lower < limit.upper and 0 < limit.velocity < math.inf and limit.acceleration > 0):
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"joint {name}: limits {limit} leave no motion")
        out.append(limit)
    return out
