"""How every node executable runs: spin until Ctrl-C or shutdown, then destroy the node and shut rclpy down."""

from collections.abc import Callable

import rclpy
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.node import Node


def spin_until_shutdown(node: Node, executor: Executor) -> int:
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def run(make_node: Callable[[], Node], make_executor: Callable[[], Executor], name: str, args: list[str] | None) -> int:
    """A node executable's main: init rclpy with ``args``, build the node and an executor (both need the
    initialised context) and spin; a node that refuses its parameters (ValueError / FileNotFoundError saying
    which) is logged and the exit status is 1."""
    rclpy.init(args=args)
    try:
        node = make_node()
    except (ValueError, FileNotFoundError) as exc:
        rclpy.logging.get_logger(name).error(f"cannot start: {exc}")
        rclpy.try_shutdown()
        return 1
    return spin_until_shutdown(node, make_executor())
