"""The inference node's parameters as ROS parameters (the values and rules themselves: nodes/params.py).

Each is declared with its type fixed (from the dataclass field, so an empty list default is still an integer or
string array), its description and, for numbers, its range (``params.RANGES``): `ros2 param describe` shows them,
and rclpy refuses a wrongly typed or out-of-range value, at start or on `ros2 param set`, saying why. The node reads
them all at configure, so a set while it is configured would change nothing until the next configure: it is refused
with that reason instead of reported done. They are not ``read_only``: set while unconfigured, they are what the next
configure reads.
"""

from collections.abc import Callable
from typing import Any

from rcl_interfaces.msg import SetParametersResult
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.node import Node
from rclpy.parameter import Parameter

from oxygen_ros.nodes import params
from oxygen_ros.nodes.declare import descriptor

ROS_TYPES: dict[Any, Parameter.Type] = {
    bool: Parameter.Type.BOOL,
    int: Parameter.Type.INTEGER,
    float: Parameter.Type.DOUBLE,
    str: Parameter.Type.STRING,
    list[int]: Parameter.Type.INTEGER_ARRAY,
    list[str]: Parameter.Type.STRING_ARRAY,
}
READ_AT_CONFIGURE = "; read at configure (set it while the node is unconfigured)"


def declare_all(node: Node) -> None:
    """Declare every parameter of ``params.defaults()`` on ``node``. ValueError naming the parameter when an override
    has the wrong type or is out of range; the half-built node is destroyed first."""
    kinds, unset = params.types(), []
    try:
        for name, default in params.defaults().items():
            kind = ROS_TYPES[kinds[name]]
            about = descriptor(params.DESCRIPTIONS[name] + READ_AT_CONFIGURE, default, params.RANGES.get(name), False)
            if node.declare_parameter(name, kind, about).type_ == Parameter.Type.NOT_SET:  # no override: the default
                unset.append(Parameter(name, kind, default))
    except (InvalidParameterTypeException, InvalidParameterValueException) as exc:
        Node.destroy_node(node)  # the subclass's own destroy_node would release what was never made
        raise ValueError(f"inference node parameter: {exc}") from exc
    node.set_parameters(unset)


def refuse_while_configured(node: Node, state: Callable[[], str]) -> None:
    """Refuse a set of one of the node's parameters unless ``state()`` is unconfigured, saying why."""
    names = set(params.defaults())

    def check(parameters: list[Parameter]) -> SetParametersResult:
        mine, now = sorted(p.name for p in parameters if p.name in names), state()
        if mine and now != "unconfigured":
            reason = f"{', '.join(mine)}: read at configure, and the node is {now}: cleanup, set it, then configure"
            return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(check)
