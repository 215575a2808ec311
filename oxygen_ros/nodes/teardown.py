"""Destroy a node with every action client and server made on it, for code that puts them on a plain Node (the demo's
and the CLI's client nodes, the tests' harnesses).

rclpy's destroy_node leaves action clients and servers alive; a node handle one of them still uses is then freed by
the garbage collector, later, possibly after the context is shut down, where Fast DDS's participant teardown can hang
for good (a clean-clone CI run did: test/nodes/test_node_teardown.py). The project's nodes destroy their own in
their destroy_node, which runs first here (an action destroyed twice would fail), then whatever is left: the node's
handle, marked by destroy_node, is freed with the last of them, now.
"""

from rclpy.action import ActionClient, ActionServer
from rclpy.node import Node


def destroy_node(node: Node) -> None:
    node.destroy_node()
    for waitable in list(node.waitables):
        if isinstance(waitable, ActionClient | ActionServer):
            waitable.destroy()
