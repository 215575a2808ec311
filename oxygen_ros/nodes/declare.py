"""Declare a node's parameters from one ``{name: (default, description)}`` table and read them back, so each node
keeps its parameters, defaults and descriptions in one place (the README table and config/oxygen.yaml mirror it).

Each parameter is declared with its type fixed by its default, an IntegerRange / FloatingPointRange where the node
gives one and ``read_only`` where the node reads it once (topics, frames, waits): `ros2 param describe` then shows
all of it, and `ros2 param set` of an out-of-range or read-once value is refused with rclpy's reason instead of
reporting success and changing nothing."""

import math
from collections.abc import Iterable
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.node import Node
from rclpy.parameter import Parameter

Table = dict[str, tuple[Any, str]]
Ranges = dict[str, tuple[float, float]]  # name: (lowest, highest), both allowed


def descriptor(description: str, default: Any, span: tuple[float, float] | None, read_only: bool) -> ParameterDescriptor:
    """The descriptor `ros2 param describe` shows: the range is integer or floating point as the default is."""
    out = ParameterDescriptor(description=description, read_only=read_only)
    if span is not None and isinstance(default, int) and not isinstance(default, bool):
        out.integer_range = [IntegerRange(from_value=int(span[0]), to_value=int(span[1]), step=1)]
    elif span is not None:
        out.floating_point_range = [FloatingPointRange(from_value=float(span[0]), to_value=float(span[1]))]
    return out


def declare(
    node: Node, table: Table, positive: Iterable[str] = (), ranges: Ranges | None = None, read_only: Iterable[str] = ()
) -> dict[str, Any]:
    """Declare every parameter of ``table`` on ``node``; their values (defaults unless overridden). When one of
    ``positive`` is not a positive number, or an override is outside its range, the half-built node is destroyed
    and ValueError says which."""
    ranges, fixed = ranges or {}, set(read_only)
    try:
        for name, (default, description) in table.items():
            node.declare_parameter(name, default, descriptor(description, default, ranges.get(name), name in fixed))
    except (InvalidParameterTypeException, InvalidParameterValueException) as exc:  # its message names the parameter
        # and its range or type (1 where 1.0 is wanted)
        Node.destroy_node(node)
        raise ValueError(str(exc)) from exc
    values = current(node, table)
    try:
        require_positive(values, *positive)
    except ValueError:
        Node.destroy_node(node)  # the subclass's own destroy_node would release what was never made
        raise
    return values


def require_positive(values: dict[str, Any], *names: str) -> None:
    """ValueError naming the first parameter that is not a finite positive number."""
    for name in names:
        if not (math.isfinite(values[name]) and values[name] > 0):
            raise ValueError(f"parameter {name} must be a positive number, got {values[name]}")


def current(node: Node, table: Table) -> dict[str, Any]:
    """The parameters' values now (they may have been set since the node started)."""
    return {name: node.get_parameter(name).value for name in table}


def keep_positive(node: Node, *names: str) -> None:
    """Refuse a later `ros2 param set` that would make one of ``names`` non-positive, saying why."""

    def check(parameters: list[Parameter]) -> SetParametersResult:
        changed = {p.name: p.value for p in parameters if p.name in names}
        try:
            require_positive(changed, *changed)
        except (ValueError, TypeError) as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(check)
