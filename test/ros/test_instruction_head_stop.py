"""With `head_may_stop`, the language head's JSON stop flag holds the controller's arm, through real rclpy nodes and
the real SmolLM2 (which answers stop to every instruction): once the narration says stop, the waypoints stop moving;
what the head names never becomes a target."""

import numpy as np
from action_msgs.msg import GoalStatus
from inference_client import MODEL_TIMEOUT
from oxygen_ros.action import FollowInstruction
from ros_harness import send_goal, wait_until
from task_graph import task_graph

from oxygen_ros.nodes.instruction_node import InstructionNode


def test_the_heads_stop_holds_the_arm(ros_domain_id):
    parameters = {"service_wait_s": 5.0, "narration_period_s": 0.5, "max_new_tokens": 24, "head_may_stop": True}
    with task_graph(ros_domain_id, InstructionNode, **parameters) as (graph, _):
        graph.start_inference()
        goal = send_goal(graph.client, FollowInstruction, "/follow_instruction", FollowInstruction.Goal(
            instruction="pick up the red triangle", rate_hz=10.0, duration_s=0.0))  # fmt: skip
        said_stop = lambda: next((i for i, f in enumerate(goal.feedback) if "says stop" in f.narration), None)  # noqa: E731
        wait_until(lambda: said_stop() is not None, MODEL_TIMEOUT, "the head's stop")
        first = said_stop()
        wait_until(lambda: len(goal.feedback) > first + 12, 10.0, "chunks after the stop")
        goal.cancel()
        assert goal.result().status == GoalStatus.STATUS_CANCELED
        held = [np.reshape(f.chunk.actions, (-1, 4))[:, :3] for f in goal.feedback[first + 4 :]]
        assert all(np.allclose(chunk, held[0]) for chunk in held), "the arm holds while the head says stop"
