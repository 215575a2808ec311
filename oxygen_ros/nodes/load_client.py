"""The multitask workload against a running graph, through real rclpy calls: one thread per task sending
`/oxygen/infer` requests to its engine, and a sampler reading every engine's pool through `/oxygen/get_pool_stats`.

Task types (each request about the camera's current frame: one pinned frame, or the newest of a ``FrameFeed``):
- ``vqa``: a new question as soon as the last answer arrives (closed loop), ``vqa_tokens`` of text each.
- ``navigation``: reasoning about the way ahead (``nav_tokens`` of text) at most ``replan_hz`` times a second; as
  in navigation_node, the velocity commands come from its controller, not from the model.
- ``instruction``: the action stream.  A chunk of ``horizon`` actions executed at ``action_hz`` lasts
  ``horizon / action_hz`` seconds, so the next one is requested every such period with that as its deadline (the
  OxyGen paper's action Hz = horizon / frame latency).  A period is missed when its chunk is late or failed, or
  when the previous chunk is still outstanding at its start.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.client import Client
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image

from oxygen_ros.msg import KvPoolStats, Observation
from oxygen_ros.nodes.convert import image_to_rgb
from oxygen_ros.nodes.polling import poll_until
from oxygen_ros.observations import content_id
from oxygen_ros.srv import GetPoolStats, Infer

BENCH_OBSERVATIONS = "/bench/observation"  # the engines listen here instead of to the camera: one pinned frame

QUESTIONS = (
    "What objects are on the table?",
    "Which object is closest to the robot?",
    "What colour is the leftmost object?",
    "Is there an obstacle in front of the robot?",
)


@dataclass(frozen=True)
class Workload:
    window_s: float
    vqa_tokens: int
    nav_tokens: int
    replan_hz: float
    action_hz: float
    horizon: int  # actions per chunk, from the warm-up chunk

    @property
    def chunk_period_s(self) -> float:
        return self.horizon / self.action_hz


@dataclass
class Reply:
    task_type: str
    sent_s: float  # since the window opened
    latency_ms: float  # round trip seen by the caller
    ok: bool
    error_code: str
    generated_tokens: int
    observation_id: str  # the frame it was about


@dataclass
class TaskLog:
    task_id: str
    task_type: str
    replies: list[Reply] = field(default_factory=list)
    periods: int = 0  # instruction: control periods in the window
    on_time: int = 0  # instruction: periods covered by a chunk that arrived within its deadline
    skipped: int = 0  # instruction: periods that began while the previous chunk was still outstanding


def call(client: Client, request, timeout: float = 300.0):
    """Send ``request`` and block this thread until the graph's executor (another thread) completes it."""
    done = threading.Event()
    future = client.call_async(request)
    future.add_done_callback(lambda _: done.set())
    if not done.wait(timeout):
        client.remove_pending_request(future)
        raise TimeoutError(f"no answer from {client.srv_name} within {timeout:.0f} s")
    return future.result()


def request(task_id: str, task_type: str, prompt: str, observation_id: str, work: Workload) -> Infer.Request:
    """The task type's request (the engine wants a token budget of at least 1 even when no text is asked for)."""
    text = {"vqa": work.vqa_tokens, "navigation": work.nav_tokens}.get(task_type, 0)
    return Infer.Request(
        task_id=task_id, task_type=task_type, prompt=prompt, observation_id=observation_id, want_text=text > 0,
        max_new_tokens=max(text, 1), want_actions=task_type == "instruction",
        deadline_s=work.chunk_period_s if task_type == "instruction" else 0.0,
    )  # fmt: skip


class TaskThread(threading.Thread):
    """One task's loop until the window closes; its replies (only those sent inside the window) go to ``log``."""

    def __init__(self, node: Node, service: str, log: TaskLog, observation: Callable[[], str], work: Workload,
                 start_s: float) -> None:  # fmt: skip
        """``observation``: the id of the frame each request is about (the newest one the camera gave)."""
        super().__init__(name=f"bench-{log.task_id}", daemon=True)
        self.client = node.create_client(Infer, service)
        self.log, self.observation, self.work, self.start_s = log, observation, work, start_s

    def _send(self, round_: int) -> Reply:
        log = self.log
        if log.task_type == "vqa":
            prompt = f"{QUESTIONS[round_ % len(QUESTIONS)]} (question {round_} from {log.task_id})"
        elif log.task_type == "navigation":
            prompt = f"Step {round_} of {log.task_id}: the robot drives to the table. Is the path ahead clear?"
        else:
            prompt = f"Pick up the red triangle ({log.task_id})."
        sent, observation_id = time.monotonic(), self.observation()
        out = call(self.client, request(log.task_id, log.task_type, prompt, observation_id, self.work))
        reply = Reply(log.task_type, sent - self.start_s, 1e3 * (time.monotonic() - sent), out.success,
                      out.error_code, out.generated_tokens, observation_id)  # fmt: skip
        log.replies.append(reply)
        return reply

    def run(self) -> None:
        if self.log.task_type == "instruction":
            self._stream()
            return
        period = 1.0 / self.work.replan_hz if self.log.task_type == "navigation" else 0.0
        round_, end = 0, self.start_s + self.work.window_s
        while (now := time.monotonic()) < end:
            self._send(round_)
            round_ += 1
            time.sleep(max(0.0, now + period - time.monotonic()))

    def _stream(self) -> None:
        """A chunk per control period, each due within the period; a period still waiting on its predecessor is
        missed (the robot would run out of actions)."""
        period = self.work.chunk_period_s
        self.log.periods = int(self.work.window_s // period)
        busy_until = 0.0
        for k in range(self.log.periods):
            tick = self.start_s + k * period
            time.sleep(max(0.0, tick - time.monotonic()))
            if busy_until > tick:
                self.log.skipped += 1
                continue
            reply = self._send(k)
            busy_until = time.monotonic()
            self.log.on_time += reply.ok and reply.latency_ms <= 1e3 * period


class PoolSampler(threading.Thread):
    """Every ``every_s``: blocks shared, summed over all engines, from each engine's `/oxygen/get_pool_stats`.
    ``peak_bytes``: the KV bytes each engine's pool has had to hold at once (``peak_used_blocks``, the high-water
    mark the pool keeps at every allocation, so no sampling interval hides a peak), summed over the engines:
    separate pools cannot lend each other blocks, so each must hold its own peak."""

    def __init__(self, node: Node, services: list[str], every_s: float) -> None:
        super().__init__(name="bench-pool-sampler", daemon=True)
        self.clients = [node.create_client(GetPoolStats, name) for name in services]
        self.every_s = every_s
        self.stop = threading.Event()
        self.samples: list[int] = []  # shared blocks

    def _stats(self) -> list[KvPoolStats]:
        return [call(client, GetPoolStats.Request(), 30.0).stats for client in self.clients]

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.samples.append(sum(stats.shared_blocks for stats in self._stats()))

    def peak_bytes(self) -> int:
        return sum(stats.peak_used_blocks * (stats.tiers[0].capacity_bytes // max(stats.total_blocks, 1))
                   for stats in self._stats())  # fmt: skip


class EngineThreads:
    """The compute threads each inference node says it took (`/diagnostics`, ``compute_threads``: "N of M CPUs"),
    by its fully qualified name without the leading slash (its status is named "<that>: KV pool")."""

    def __init__(self, node: Node) -> None:
        self.reported: dict[str, int] = {}
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            name = status.name.removesuffix(": KV pool")
            for value in status.values:
                if value.key == "compute_threads":
                    self.reported[name] = int(value.value.split()[0])

    def of(self, names: list[str], timeout: float = 10.0) -> list[int]:
        """Each named node's threads, waiting up to ``timeout`` for their reports (they publish once a second)."""
        def missing() -> str:
            return ", ".join(name for name in names if name not in self.reported)

        poll_until(lambda: not missing(), timeout, lambda: f"compute_threads on /diagnostics from {missing()}",
                   period_s=0.1)  # fmt: skip
        return [self.reported[name] for name in names]


def take_frames(graph: Any, node: Node, count: int, timeout: float = 60.0) -> list[Observation]:
    """``count`` distinct camera_sim frames, each its Observation with the Image it names in ``images``; then stop the
    camera (``graph``: a ``ProcessGraph`` with camera_sim as ``graph.camera``), so that only these frames exist."""
    texts: list[Observation] = []
    images: dict[str, Image] = {}
    node.create_subscription(Observation, "/oxygen/observation", texts.append, 10)
    node.create_subscription(Image, "/camera/image_raw",
                             lambda msg: images.setdefault(content_id("", [image_to_rgb(msg)], []), msg),
                             qos_profile_sensor_data)  # fmt: skip
    def found() -> dict[str, Observation]:
        return {text.observation_id: text for text in list(texts) if text.observation_id in images}

    poll_until(lambda: len(found()) >= count, timeout, lambda: f"{count} distinct frames from camera_sim (had "
               f"{len(found())})")  # fmt: skip
    graph.executor.remove_node(graph.camera)
    frames = list(found().values())[:count]
    for frame in frames:
        frame.images = [images[frame.observation_id]]
    return frames


def pin_observation(node: Node, frame: Observation, services: list[str], timeout: float = 60.0) -> str:
    """Give ``frame`` to every engine (on BENCH_OBSERVATIONS, until each knows it); its observation_id."""
    publisher = node.create_publisher(Observation, BENCH_OBSERVATIONS, 10)
    deadline = time.monotonic() + timeout
    probe = Infer.Request(prompt="probe", observation_id=frame.observation_id, want_text=True, max_new_tokens=0)
    for service in services:
        client = node.create_client(Infer, service)

        def known() -> bool:  # refused for the zero token budget once known; until then the frame goes out again
            if call(client, probe).error_code != "NOT_FOUND":
                return True
            publisher.publish(frame)
            return False

        poll_until(known, deadline - time.monotonic(), f"the pinned observation at {service}", period_s=0.1)
    return frame.observation_id


class FrameFeed(threading.Thread):
    """A moving camera: frame i goes to every engine (BENCH_OBSERVATIONS) at ``start_s + i / hz``, and requests name
    it (``current``) ``SETTLE_S`` later, once it has reached them; the first frame is current from the start."""

    SETTLE_S = 0.05

    def __init__(self, node: Node, frames: list[Observation], hz: float, start_s: float) -> None:
        super().__init__(name="bench-frame-feed", daemon=True)
        self.publisher = node.create_publisher(Observation, BENCH_OBSERVATIONS, 10)
        self.frames, self.hz, self.start_s = frames, hz, start_s
        self.current_id = frames[0].observation_id
        self.stop = threading.Event()

    def current(self) -> str:
        return self.current_id

    def run(self) -> None:
        for i, frame in enumerate(self.frames[1:], start=1):
            if self.stop.wait(max(0.0, self.start_s + i / self.hz - time.monotonic())):
                return
            self.publisher.publish(frame)
            if self.stop.wait(self.SETTLE_S):
                return
            self.current_id = frame.observation_id


def warm_up(node: Node, service: str, task_id: str, kind: str, observation_id: str, work: Workload) -> Infer.Response:
    """One request of the task's kind before the window, one task after the other: the first on an engine prefills
    the observation, later ones on the same engine reuse it (``reused_prefix_tokens``; never across isolated
    engines).  The reply (its chunk's horizon is 0 for VQA); RuntimeError if the engine cannot serve it."""
    client = node.create_client(Infer, service)
    warm = request(task_id, kind, "Warm up.", observation_id, work)
    warm.deadline_s = 0.0  # the first chunk pays the prefill: no deadline yet
    out = call(client, warm)
    if not out.success:
        raise RuntimeError(f"warm-up of {task_id} on {service} failed: {out.error_code}: {out.message}")
    return out
