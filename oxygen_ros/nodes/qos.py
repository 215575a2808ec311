"""The QoS of every service and action of the graph, servers and clients: the ROS services default (reliable,
volatile, keep last), with a deep queue.

DDS keeps only ``depth`` untaken requests per server and answers per client (10 by the ROS default): a burst of
more concurrent calls than that to one service, or of more answers than that to one client, loses the rest silently,
and their callers wait until their own timeout, or forever (the fuzz suite found 30 of 40 concurrent questions to
/vqa/ask never answered). With a deep queue the burst reaches the node, whose own bounds (the engine's queue) answer
the excess RESOURCE_EXHAUSTED instead.
"""

from rclpy.qos import QoSProfile

SERVICE_QUEUE_DEPTH = 256
SERVICE_QUEUE = QoSProfile(depth=SERVICE_QUEUE_DEPTH)

# How long a finished goal's result can still be fetched: rclpy's default (10 s) is shorter than a client busy with
# other tasks may take to ask, and the client then only gets STATUS_UNKNOWN.
RESULT_KEEP_S = 300

# What every action server and client of the graph passes rclpy: deep queues for its goal, result and cancel services
# (a server also keeps each result RESULT_KEEP_S).
ACTION_QUEUES = {"goal_service_qos_profile": SERVICE_QUEUE, "result_service_qos_profile": SERVICE_QUEUE,
                 "cancel_service_qos_profile": SERVICE_QUEUE}  # fmt: skip
ACTION_SERVER_QOS = {**ACTION_QUEUES, "result_timeout": RESULT_KEEP_S}

# How long a node going down waits for its last command (a zero Twist, an arm's hold) to be acknowledged by the
# robot's subscribers before rclpy goes.
STOP_ACK_S = 0.5
