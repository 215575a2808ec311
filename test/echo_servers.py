"""Test servers for every oxygen_ros service and action, answering from the request.

They exercise the interface plumbing (generated types, names, nested messages, feedback, cancel) through real rclpy;
the real servers are the inference and task nodes. Responses carry request fields back (in text, message and
counters) so a test can see that every field crossed the wire. Run as a script, this module serves them in its own
process.
"""

import math
import time

import rclpy
from geometry_msgs.msg import Twist
from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node

from oxygen_ros.action import FollowInstruction, Navigate
from oxygen_ros.msg import ActionChunk, KvPoolStats, TaskKvUsage, TierStats
from oxygen_ros.srv import AskQuestion, GetPoolStats, Infer

NAV_STEP_M = 0.1  # distance covered per feedback step of the navigation server
STEP_PERIOD_S = 0.05  # time between navigation feedback steps


class EchoServers(Node):
    """Serves /oxygen/infer, /vqa/ask, /oxygen/get_pool_stats, /follow_instruction and /navigate."""

    def __init__(self, context=None, name: str = "oxygen_echo_servers"):
        super().__init__(name, context=context)
        group = ReentrantCallbackGroup()  # long-running goals must not block services or cancel requests
        self.create_service(Infer, "/oxygen/infer", self._infer, callback_group=group)
        self.create_service(AskQuestion, "/vqa/ask", self._ask, callback_group=group)
        self.create_service(GetPoolStats, "/oxygen/get_pool_stats", self._pool_stats, callback_group=group)
        accept_cancel = {"cancel_callback": lambda _: CancelResponse.ACCEPT, "callback_group": group}
        self._actions = [
            ActionServer(self, FollowInstruction, "/follow_instruction", self._follow, **accept_cancel),
            ActionServer(self, Navigate, "/navigate", self._navigate, **accept_cancel),
        ]

    def destroy_node(self):
        for server in self._actions:
            server.destroy()
        return super().destroy_node()

    def _chunk(self, task_id: str, step: int) -> ActionChunk:
        chunk = ActionChunk(task_id=task_id, horizon=2, action_dim=3, period_s=0.1)
        chunk.header.stamp = self.get_clock().now().to_msg()
        chunk.actions = [float(step * 10 + i) for i in range(chunk.horizon * chunk.action_dim)]
        return chunk

    def _infer(self, request: Infer.Request, response: Infer.Response) -> Infer.Response:
        if not request.prompt:
            response.error_code, response.message = "INVALID_ARGUMENT", "empty prompt"
            return response
        response.success = True
        response.message = (
            f"task_type={request.task_type} observation_id={request.observation_id} "
            f"priority={request.priority} deadline_s={request.deadline_s:g}"
        )
        if request.want_text:
            response.text = f"echo: {request.prompt}"
        if request.want_actions:
            response.actions = self._chunk(request.task_id, 0)
        response.prompt_tokens = len(request.prompt.split())
        response.generated_tokens = request.max_new_tokens
        return response

    def _ask(self, request: AskQuestion.Request, response: AskQuestion.Response) -> AskQuestion.Response:
        response.success = bool(request.question)
        response.error_code = "" if response.success else "INVALID_ARGUMENT"
        response.answer = f"about {request.observation_id or 'latest'}: {request.question}"
        response.reused_prefix_tokens = request.max_new_tokens
        return response

    def _pool_stats(self, request: GetPoolStats.Request, response: GetPoolStats.Response) -> GetPoolStats.Response:
        tasks = [
            TaskKvUsage(task_id="vqa-1", task_type="vqa", kv_dtype="int8", blocks=4, shared_blocks=3, bytes=4096),
            TaskKvUsage(task_id="nav-1", task_type="navigation", kv_dtype="bfloat16", blocks=5, shared_blocks=3),
        ]
        tiers = [
            TierStats(name="gpu", capacity_bytes=1 << 30, used_bytes=1 << 20, blocks=6, hits=10, misses=2),
            TierStats(name="cpu", capacity_bytes=1 << 32, used_bytes=0, blocks=0, hits=0, misses=2),
        ]
        response.stats = KvPoolStats(
            model="echo", block_size=16, total_blocks=64, free_blocks=55, cached_blocks=3, shared_blocks=3,
            prefix_hit_rate=0.5, fragmentation=0.25, evictions=7, active_requests=2, queued_requests=1,
            tasks=tasks, tiers=tiers,
        )  # fmt: skip
        response.stats.header.stamp = self.get_clock().now().to_msg()
        return response

    def _follow(self, goal_handle) -> FollowInstruction.Result:
        goal = goal_handle.request
        result = FollowInstruction.Result()
        if not goal.rate_hz > 0:
            goal_handle.abort()
            result.error_code, result.message = "INVALID_ARGUMENT", f"rate_hz must be > 0, got {goal.rate_hz}"
            return result
        start = time.monotonic()
        while goal.duration_s <= 0 or time.monotonic() - start < goal.duration_s:
            if goal_handle.is_cancel_requested:
                goal_handle.canceled()
                break
            feedback = FollowInstruction.Feedback(narration=f"doing: {goal.instruction}")
            feedback.chunk = self._chunk("follow", result.chunks_sent)
            goal_handle.publish_feedback(feedback)
            result.chunks_sent += 1
            time.sleep(1.0 / goal.rate_hz)
        else:
            goal_handle.succeed()
            result.success = True
        result.achieved_rate_hz = result.chunks_sent / (time.monotonic() - start)
        return result

    def _navigate(self, goal_handle) -> Navigate.Result:
        goal = goal_handle.request
        position = goal.target.pose.position
        remaining = math.hypot(position.x, position.y)
        result = Navigate.Result()
        while remaining > 0:
            if goal_handle.is_cancel_requested:
                goal_handle.canceled()
                result.distance_remaining = remaining
                return result
            step = min(NAV_STEP_M, remaining)
            remaining -= step
            cmd = Twist()
            cmd.linear.x = step / STEP_PERIOD_S
            reasoning = f"heading to ({position.x:g}, {position.y:g}) in {goal.target.header.frame_id}"
            goal_handle.publish_feedback(Navigate.Feedback(cmd=cmd, reasoning=reasoning, distance_remaining=remaining))
            time.sleep(STEP_PERIOD_S)
        goal_handle.succeed()
        result.success = True
        return result


def main() -> None:
    rclpy.init()
    executor = MultiThreadedExecutor()
    executor.add_node(EchoServers())
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
