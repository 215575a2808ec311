"""A real task graph for the task-node tests: camera_sim (seeded scene), one task node, a client node, and a real
`oxygen_inference` serving SmolLM2 that a test can start, stop (the service disappears, as when its process dies)
and start again, all spinning in one MultiThreadedExecutor like `oxygen-ros up`."""

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from action_msgs.msg import GoalStatus
from oxygen_ros.action import FollowInstruction
from oxygen_ros.msg import KvPoolStats
from rclpy.context import Context
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_harness import make_context, send_goal, spin_nodes, wait_until

from oxygen_ros import simulation
from oxygen_ros.nodes.arm_sim import ArmSim
from oxygen_ros.nodes.camera_sim import CameraSim
from oxygen_ros.nodes.inference_node import InferenceNode
from inference_client import pool_stats

SMOLLM2_BLOCK_BYTES = 30 * 2 * 3 * 64 * 16 * 4  # layers x (K, V) x KV heads x head_dim x tokens x float32
TOTAL_BLOCKS = 96
INFERENCE = {
    "model": "smollm2-135m",
    "kv_cache_bytes": TOTAL_BLOCKS * SMOLLM2_BLOCK_BYTES,
    "max_model_len": 512,
    "max_num_seqs": 4,
    "observation_ring": 64,  # a question about a named frame may wait seconds behind others while frames arrive
}
CAMERA = {"seed": 0, "rate_hz": 5.0}
# the simulated SO-100's joint mapping (and its joints' limits)
SO100_MAPPING = ("action_joint_names", "state_joint_names", "gripper_joint_names", "joint_acceleration_limits")
MODEL_LOAD_S = 120


class TaskGraph:
    def __init__(self, context: Context, executor, client: Node, inference_parameters: dict) -> None:
        self.context, self.executor, self.client = context, executor, client
        self.inference_parameters = inference_parameters
        self.inference: InferenceNode | None = None

    def start_inference(self) -> None:
        node = InferenceNode(
            context=self.context,
            parameter_overrides=[Parameter(k, value=v) for k, v in self.inference_parameters.items()],
        )
        self.executor.add_node(node)
        self.inference = node
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, "configure failed (see the node's log)"
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS

    def add_arm(self, joints: list[str], namespace: str = "", state_rate_hz: float = 20.0, **parameters) -> ArmSim:
        """A simulated FollowJointTrajectory arm with ``joints``, all at 0 (and arm_sim's ``parameters``), spinning in
        this graph."""
        given = {"joint_names": joints, "initial_positions": [0.0] * len(joints), "state_rate_hz": state_rate_hz}
        arm = ArmSim(context=self.context, namespace=namespace,
                     parameter_overrides=[Parameter(k, value=v) for k, v in (given | parameters).items()])  # fmt: skip
        self.executor.add_node(arm)
        return arm

    def follow(self, instruction: str) -> FollowInstruction.Result:
        """Run a 3 s FollowInstruction goal at 5 Hz to its end: its result, once it SUCCEEDED with at least two
        chunks sent and none missed."""
        goal = FollowInstruction.Goal(instruction=instruction, rate_hz=5.0, duration_s=3.0)
        out = send_goal(self.client, FollowInstruction, "/follow_instruction", goal).result(timeout=90.0)
        assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
        assert out.result.chunks_sent >= 2 and out.result.chunks_missed == 0, out.result
        return out.result

    def wait_for_frame(self, timeout: float = 10.0) -> None:
        """Until the inference node holds a camera frame: a VLA asked for actions without one refuses to act."""
        wait_until(lambda: self.inference.held_observations() > 0, timeout, "a camera frame in the inference node")

    def stop_inference(self) -> None:
        """Remove the inference node from the graph: its services vanish, as when its process exits."""
        node, self.inference = self.inference, None
        self.executor.remove_node(node)
        node.destroy_node()

    def idle_pool(self, timeout: float = MODEL_LOAD_S) -> KvPoolStats:
        """Pool stats once no request runs or waits and no block is held by one (only free or cached blocks)."""
        deadline = time.monotonic() + timeout
        while True:
            stats = pool_stats(self.client)
            held = stats.total_blocks - stats.free_blocks - stats.cached_blocks
            if (held, stats.active_requests, stats.queued_requests, len(stats.tasks)) == (0, 0, 0, 0):
                return stats
            if time.monotonic() > deadline:
                raise TimeoutError(f"pool still busy after {timeout} s: {held} blocks held, {stats}")
            time.sleep(0.2)


@contextmanager
def task_graph(
    domain_id: int, make_task, inference: dict = INFERENCE, **task_parameters
) -> Iterator[tuple[TaskGraph, Node]]:
    """(graph, task node) with the camera running and NO inference node yet (tests start it with ``inference``'s
    parameters)."""
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    context = make_context(domain_id)
    try:
        camera = CameraSim(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in CAMERA.items()])
        name = sys.modules[make_task.__module__].NODE_NAME
        simulated = simulation.parameters()[name]  # what `oxygen-ros up` gives that node
        if "action_joint_names" in task_parameters:  # a test's own arm replaces the simulated SO-100's joint mapping
            simulated = {k: v for k, v in simulated.items() if k not in SO100_MAPPING}
        simulated |= task_parameters
        task = make_task(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in simulated.items()])
        client = Node("task_test_client", context=context)
        with spin_nodes(context, camera, task, client, num_threads=6) as executor:
            graph = TaskGraph(context, executor, client, inference)
            graph.camera = camera
            try:
                yield graph, task
            finally:
                if graph.inference is not None:
                    graph.stop_inference()
    finally:
        context.try_shutdown()
        torch.set_num_threads(saved_threads)
