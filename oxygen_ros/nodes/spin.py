"""How every node executable runs: spin until Ctrl-C or shutdown, then destroy the node and shut rclpy down."""

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
