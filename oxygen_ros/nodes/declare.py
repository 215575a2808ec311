"""Declare a node's parameters from one ``{name: (default, description)}`` table and read them back, so each node
keeps its parameters, defaults and descriptions in one place (the README table and config/oxygen.yaml mirror it)."""

import math
from collections.abc import Iterable
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter

Table = dict[str, tuple[Any, str]]


def declare(node: Node, table: Table, positive: Iterable[str] = ()) -> dict[str, Any]:
    """Declare every parameter of ``table`` on ``node``; their values (defaults unless overridden). When one of
    ``positive`` is not a positive number the half-built node is destroyed and ValueError says which."""
    for name, (default, description) in table.items():
        node.declare_parameter(name, default, ParameterDescriptor(description=description))
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
