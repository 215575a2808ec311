"""oxygen_ros: one inference node, one unified paged KV pool, many robot tasks.

The engine (``oxygen_ros.engine``, ``oxygen_ros.models``, ``oxygen_ros.layers``, ``oxygen_ros.kernels``) is plain
Python + torch and never imports ROS; ``oxygen_ros.nodes`` translates ROS messages to engine calls.
"""

__version__ = "0.1.0"
