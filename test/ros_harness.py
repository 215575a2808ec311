"""Run real rclpy nodes in tests without two test runs (or a robot on the same host) hearing each other.

Isolation is by DDS domain: every test session leases its own ROS_DOMAIN_ID with an flock'ed file, so concurrent
sessions on one machine get different ids, and a crashed session's lease dies with its process. Discovery is
limited to this host. Nodes run for real: several in one MultiThreadedExecutor on a background thread, or as
subprocesses that the test talks to over DDS.
"""

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import rclpy
from rcl_interfaces.srv import SetParameters
from rclpy.action.client import ClientGoalHandle
from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter
from oxygen_ros.nodes.action_client import ActionClient
from oxygen_ros.nodes import teardown
from oxygen_ros.nodes.executor import Executor
from oxygen_ros.nodes.polling import poll_until

DOMAIN_IDS = range(100, 200)
LOCK_DIR = Path(tempfile.gettempdir()) / "oxygen_ros_domains"


@dataclass
class DomainLease:
    """A ROS_DOMAIN_ID held by this process until `release()` (or its exit)."""

    domain_id: int
    _lock_file: IO = field(repr=False)

    def release(self) -> None:
        self._lock_file.close()


def acquire_domain_id() -> DomainLease:
    """Lease the first free id in DOMAIN_IDS. flock is per open file, so even one process gets distinct ids."""
    LOCK_DIR.mkdir(exist_ok=True)
    for domain_id in DOMAIN_IDS:
        lock_file = (LOCK_DIR / f"{domain_id}.lock").open("w")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            continue
        return DomainLease(domain_id, lock_file)
    raise RuntimeError(f"all ROS domain ids {DOMAIN_IDS.start}..{DOMAIN_IDS.stop - 1} are leased (see {LOCK_DIR})")


def make_context(domain_id: int) -> Context:
    context = Context()
    rclpy.init(context=context, domain_id=domain_id)
    return context


def wait_for(future, timeout: float = 10.0):
    """Block until an rclpy future, completed by an executor on another thread, is done; return its result."""
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    if not done.wait(timeout):
        raise TimeoutError(f"no result within {timeout} s")
    return future.result()


def wait_until(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    poll_until(predicate, timeout, what, period_s=0.01)


def call_service(node: Node, srv_type, name: str, request, timeout: float = 10.0, resend_s: float | None = None):
    """Call a service from `node`, which must be spinning on another thread (see spin_nodes). ``resend_s``: for a
    query, send it again after that long without an answer, until ``timeout``: just after discovery a server can
    see the request before its reply writer has matched the client, and that reply is lost (DDS services)."""
    client = node.create_client(srv_type, name)
    try:
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"service {name} not available within {timeout} s")
        deadline = time.monotonic() + timeout
        while resend_s is not None and time.monotonic() + resend_s < deadline:
            try:
                return wait_for(client.call_async(request), resend_s)
            except TimeoutError:
                continue
        return wait_for(client.call_async(request), max(0.0, deadline - time.monotonic()))
    finally:
        node.destroy_client(client)


@dataclass
class Goal:
    """An accepted action goal and the feedback received for it so far."""

    client: ActionClient
    handle: ClientGoalHandle
    feedback: list = field(default_factory=list)

    def wait_feedback(self, count: int, timeout: float = 10.0) -> None:
        wait_until(lambda: len(self.feedback) >= count, timeout, f"{count} feedback messages")

    def streamed_text(self, until: str, timeout: float = 30.0, strip: bool = False) -> str:
        """The feedback's text joined, once it equals ``until`` (after ``strip`` if asked) or after ``timeout`` s:
        an action's feedback (a topic) and its result (a service reply) travel apart, so the result may come first."""
        deadline = time.monotonic() + timeout
        while True:
            joined = "".join(f.text for f in list(self.feedback))
            joined = joined.strip() if strip else joined
            if joined == until or time.monotonic() > deadline:
                return joined
            time.sleep(0.02)

    def result(self, timeout: float = 10.0):
        """The GetResult response: `.status` (action_msgs GoalStatus) and `.result`."""
        return wait_for(self.handle.get_result_async(), timeout)

    def cancel(self, timeout: float = 10.0):
        return wait_for(self.handle.cancel_goal_async(), timeout)


def set_parameter(client: Node, node: str, name: str, value) -> None:
    """Set ``node``'s parameter ``name`` as `ros2 param set` does (its type is the value's); asserts it took it."""
    request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
    (result,) = call_service(client, SetParameters, f"{node}/set_parameters", request).results
    assert result.successful, result.reason


def send_goal(node: Node, action_type, name: str, goal, timeout: float = 10.0) -> Goal:
    """Send `goal` from `node` (spinning on another thread: hence the project's ActionClient); return it once
    accepted."""
    client = ActionClient(node, action_type, name)
    if not client.wait_for_server(timeout_sec=timeout):
        raise TimeoutError(f"action server {name} not available within {timeout} s")
    feedback: list = []
    handle = wait_for(
        client.send_goal_async(goal, feedback_callback=lambda msg: feedback.append(msg.feedback)), timeout
    )
    if not handle.accepted:
        raise RuntimeError(f"goal to {name} rejected")
    return Goal(client, handle, feedback)


@contextmanager
def spin_nodes(context: Context, *nodes: Node, num_threads: int = 4) -> Iterator[Executor]:
    """Spin `nodes` in the project's multi-threaded executor on a background thread, as the node executables do;
    on exit stop it and destroy the nodes."""
    executor = Executor(num_threads=num_threads, context=context)
    for node in nodes:
        executor.add_node(node)
    thread = threading.Thread(target=executor.spin, name="ros-executor", daemon=True)
    thread.start()
    try:
        yield executor
    finally:
        executor.shutdown()
        thread.join(timeout=10)
        for node in nodes:
            teardown.destroy_node(node)  # with the action clients send_goal made on it


def clean_fastdds_shm() -> str:
    """Remove shared-memory segments left by dead Fast DDS participants (live ones are kept); return the report.

    The venv's `fastdds` wrapper runs the system python3, which may lack psutil, so run its script with ours.
    """
    script = Path(sys.prefix) / "tools" / "fastdds" / "fastdds.py"
    command = [sys.executable, str(script)] if script.exists() else [shutil.which("fastdds") or "fastdds"]
    return subprocess.run([*command, "shm", "clean"], check=True, capture_output=True, text=True, timeout=60).stdout


@dataclass
class NodeProcess:
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def node_process(
    args: list[str], context: Context, srv_type, service: str, timeout: float = 30.0
) -> Iterator[NodeProcess]:
    """Start a node process (`args` after the interpreter) and wait until it serves `service`.

    The child inherits this session's ROS_DOMAIN_ID. At exit it gets SIGINT (a clean rclpy shutdown), and SIGKILL
    only if it does not stop; a SIGKILLed child cannot release its Fast DDS shared memory, so that is cleaned up.
    """
    fd, log_name = tempfile.mkstemp(prefix="oxygen_ros_node_", suffix=".log")
    log_path = Path(log_name)
    with os.fdopen(fd, "w") as log:
        process = subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT)
    handle = NodeProcess(process, log_path)
    try:
        _wait_for_service(handle, context, srv_type, service, timeout)
        yield handle
    finally:
        _stop(process)
        log_path.unlink()


def _wait_for_service(handle: NodeProcess, context: Context, srv_type, service: str, timeout: float) -> None:
    probe = Node(f"probe_{os.getpid()}_{handle.process.pid}", context=context)
    client = probe.create_client(srv_type, service)
    try:
        deadline = time.monotonic() + timeout
        while not client.wait_for_service(timeout_sec=0.2):
            if handle.process.poll() is not None:
                raise RuntimeError(f"node process exited with {handle.process.returncode}:\n{handle.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{service} did not appear within {timeout} s:\n{handle.log()}")
    finally:
        probe.destroy_node()


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.returncode == -signal.SIGKILL:  # by us or anyone else: it could not release its shared memory
        clean_fastdds_shm()
