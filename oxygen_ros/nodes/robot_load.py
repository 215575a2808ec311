"""The robot workload of `bench --suite robot`: its parameters, those of the nodes it adds beside the engine(s)
(arm_sim with one joint per action dimension of the model, instruction_node on the VLA path), and the run itself: one
FollowInstruction goal and question threads calling `/oxygen/infer` about the newest frame and the arm's state (the
suite's docstring says what is measured; the suite brings the engines and those nodes up, each a process of its
own)."""

import contextlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rcl_interfaces.msg import Log
from sensor_msgs.msg import Image, JointState
from tqdm import tqdm

from oxygen_ros.action import FollowInstruction
from oxygen_ros.nodes.action_client import ActionClient
from oxygen_ros.nodes.arm_sim import NODE_NAME as ARM_SIM
from oxygen_ros.nodes.instruction_node import NODE_NAME as INSTRUCTION_NODE
from oxygen_ros.nodes.vla_arm import MISSED
from oxygen_ros.nodes.load_client import QUESTIONS, call
from oxygen_ros.nodes.polling import poll_until
from oxygen_ros.nodes.process_graph import ProcessGraph
from oxygen_ros.srv import Infer

ARM_NAMESPACE = "arm_engine"  # the isolated setting's engine for the arm
INSTRUCTION = "pick up the red triangle"
LIMIT, SPEED = 50.0, 1000.0  # random weights act noisily: wide limits (the arm's limits are not what is measured)
ANSWER_WAIT_S = 60.0  # the longest a question or the goal's end may take past the window
MAX_WARNINGS = 1000  # instruction_node's warnings kept per setting (a chunk missed says why in one)
LOG_WAIT_S = 2.0  # how long the warnings of the goal's missed chunks may trail its result on /rosout
START_WAIT_S = 60.0  # how long arm_sim and instruction_node, processes of their own, may take to come up


@dataclass(frozen=True)
class RobotWorkload:
    """What the arm and the questions do (``bench --suite robot``'s parameters)."""

    model: str = "pi05-random-tiny"
    window_s: float = 30.0
    rate_hz: float = 10.0  # the control rate: the model's action period is 1 / rate_hz
    actions_per_chunk: int = 50  # LeRobot's async inference with pi0.5: the whole chunk, the next asked at half
    chunk_threshold: int = 25
    vqa: int = 4  # concurrent question loops
    vqa_tokens: int = 16
    kv_mib: int = 128  # each engine's pool
    threads: int = 2  # each engine's compute threads (num_threads; the two isolated engines are two processes)

    @property
    def chunk_window_s(self) -> float:
        return (self.actions_per_chunk - self.chunk_threshold) / self.rate_hz


def engine_parameters(setting: RobotWorkload) -> dict[str, Any]:
    """Every engine's parameters over the file's (the same for the shared one and both isolated ones)."""
    return {"allow_random_weights": True, "action_period_s": 1.0 / setting.rate_hz,
            "kv_cache_bytes": setting.kv_mib << 20, "max_model_len": 2048, "num_threads": setting.threads,
            "camera_topic": "/camera/image_raw"}  # every engine sees the one camera, namespaced or not  # fmt: skip


def arm_parameters(setting: RobotWorkload, joints: int) -> dict[str, dict[str, Any]]:
    """arm_sim's (``joints`` joints) and instruction_node's parameters, by node name."""
    names = [f"arm_joint_{i}" for i in range(joints)]
    arm = {"joint_names": names, "initial_positions": [0.0] * joints, "state_rate_hz": 50.0}
    instruction = {"action_joint_names": names, "joint_lower_limits": [-LIMIT] * joints,
                   "joint_upper_limits": [LIMIT] * joints, "joint_velocity_limits": [SPEED] * joints,
                   "joint_acceleration_limits": [math.inf] * joints,  # waived (.inf): random weights jolt
                   "max_start_jump": 10.0, "max_tracking_error": 10.0, "input_timeout_s": 1.0,
                   "actions_per_chunk": setting.actions_per_chunk, "chunk_threshold": setting.chunk_threshold,
                   "max_missed_chunks": 1000, "narration_period_s": 3600.0, "max_new_tokens": 1,
                   "max_rate_hz": float(max(50.0, setting.rate_hz))}  # fmt: skip
    return {ARM_SIM: arm, INSTRUCTION_NODE: instruction}


class Questions(threading.Thread):
    """One VQA loop about the newest frame and the arm's state now (pi0.5's language head reads it in its prompt,
    as an observation from observation_node carries it) until ``stop``; each answer's (ok, latency ms, error code)."""

    def __init__(self, node: Node, index: int, setting: RobotWorkload, states: list[JointState],
                 stop: threading.Event) -> None:  # fmt: skip
        super().__init__(name=f"bench-vqa-{index}", daemon=True)
        self.client = node.create_client(Infer, "/oxygen/infer")
        self.index, self.setting, self.states, self.stop = index, setting, states, stop
        self.answers: list[tuple[bool, float, str]] = []

    def run(self) -> None:
        round_ = 0
        while not self.stop.is_set():
            prompt = f"{QUESTIONS[(self.index + round_) % len(QUESTIONS)]} (question {round_} of vqa-{self.index})"
            sent = time.monotonic()
            try:
                out = call(self.client, Infer.Request(task_id=f"vqa-{self.index}", task_type="vqa", prompt=prompt,
                                                      want_text=True, max_new_tokens=self.setting.vqa_tokens,
                                                      state=list(self.states[-1].position)), ANSWER_WAIT_S)  # fmt: skip
            except TimeoutError:
                self.answers.append((False, 1e3 * (time.monotonic() - sent), "NO_ANSWER"))
                continue
            self.answers.append((out.success, 1e3 * (time.monotonic() - sent), out.error_code))
            round_ += 1


class Drive(NamedTuple):
    goal: Any  # the goal's GetResult response
    answers: list[tuple[bool, float, str]]  # every question's (ok, latency ms, error code)
    elapsed_s: float
    warnings: list[str]  # instruction_node's warnings and errors on /rosout (why a chunk was missed)


def drive(graph: ProcessGraph, mode: str, setting: RobotWorkload, given_up: Callable[[], str] = str) -> Drive:
    """One setting on its started graph (``shared``: one engine; ``isolated``: one for the arm, one for the
    questions): warm each engine, then the goal and the question loops for ``window_s``; ``given_up()`` says why
    the graph cannot carry on ('' while it can: a node given up on, a crashed one whose goal is lost), ending the
    wait at once."""
    node = graph.add_client(f"bench_robot_{mode}")
    frames, states, warnings = [], [], []
    node.create_subscription(Image, "/camera/image_raw", frames.append, qos_profile_sensor_data)
    node.create_subscription(JointState, "/joint_states", states.append, 10)

    def on_log(msg: Log) -> None:
        if msg.name.endswith(INSTRUCTION_NODE) and msg.level >= Log.WARN and len(warnings) < MAX_WARNINGS:
            warnings.append(msg.msg)

    node.create_subscription(Log, "/rosout", on_log, 100)
    poll_until(lambda: len(frames) >= 2 and states, START_WAIT_S, "camera frames and joint states", given_up=given_up)
    for namespace in ("", ARM_NAMESPACE) if mode == "isolated" else ("",):
        warm = Infer.Request(task_id="warm-up", task_type="instruction", prompt=INSTRUCTION, want_actions=True,
                             max_new_tokens=1, state=[0.0] * len(states[-1].position))  # fmt: skip
        out = call(node.create_client(Infer, f"/{namespace}/oxygen/infer" if namespace else "/oxygen/infer"), warm)
        if not out.success:
            raise RuntimeError(f"warm-up of the {mode} engine failed: {out.error_code} {out.message}")
    stop = threading.Event()
    askers = [Questions(node, i, setting, states, stop) for i in range(setting.vqa)]
    goal_client = ActionClient(node, FollowInstruction, "/follow_instruction")
    try:
        poll_until(goal_client.server_is_ready, START_WAIT_S, "the instruction node", given_up=given_up)
        accepted = threading.Event()
        sent = goal_client.send_goal_async(FollowInstruction.Goal(
            instruction=INSTRUCTION, rate_hz=float(setting.rate_hz), duration_s=float(setting.window_s)))  # fmt: skip
        sent.add_done_callback(lambda _: accepted.set())
        for asker in askers:
            asker.start()
        start = time.monotonic()
        if not accepted.wait(10.0) or not sent.result().accepted:
            raise RuntimeError("the instruction node did not accept the goal")
        ended = sent.result().get_result_async()
        with tqdm(total=math.ceil(setting.window_s), desc=f"robot ({mode})", unit="s") as bar:

            def over() -> bool:
                bar.update(min(time.monotonic() - start, bar.total) - bar.n)
                return ended.done()

            poll_until(over, setting.window_s + ANSWER_WAIT_S, "the goal's end", given_up=given_up)
        elapsed = time.monotonic() - start
        missed = ended.result().result.chunks_missed  # each warned, saying why: the warnings may trail the result
        with contextlib.suppress(TimeoutError):
            poll_until(lambda: sum(MISSED in line for line in warnings) >= missed, LOG_WAIT_S, "the misses' warnings")
    finally:
        stop.set()
        for asker in askers:
            if asker.is_alive():
                asker.join(timeout=ANSWER_WAIT_S)
        goal_client.destroy()
    return Drive(ended.result(), [a for asker in askers for a in asker.answers], elapsed, warnings)
