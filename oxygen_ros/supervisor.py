"""A process per node, as `ros2 launch oxygen_ros oxygen.launch.py` runs them on the robot, each restarted when it
dies (`oxygen-ros up`).

Why processes: one node's fault (a leak, a crash in native code, the OOM killer) must not take the others down;
in one process a single bad goal once killed the inference node, its KV pool and every task node with it.

Each node runs its installed executable (``lib/oxygen_ros/<name>``, what `ros2 run` runs) under its name (``-r
__node:=``, as launch's ``name=``: a bimanual robot's left_arm_sim runs arm_sim) with the same ``--params-file`` as
the launch file, plus one more file for the overrides (as launch writes for a dict). A keeper
thread per node waits on its process; when it exits the node is started again after a backoff (0.5 s, doubling,
at most ``max_delay_s``); more than ``per_minute`` restarts within a minute and the supervisor gives up on it
(``failed``), since a node that dies at once every time would otherwise loop forever: so a node refusing its
parameters is asked to exit (``spin.EXIT_ON_REFUSAL``; under `ros2 launch` it stays up refusing instead). The
inference node is a lifecycle node: with ``autostart`` (the default) each start of it is configured and activated
(the model loads) before it serves, while the other nodes go on serving (their calls answer UNAVAILABLE meanwhile);
without, every start of it stays unconfigured for `ros2 lifecycle set`, as the launch file's `autostart:=false`.

Stopping sends SIGINT to every process (rclpy shuts down cleanly, the inference node persists its KV tiers) and
SIGKILL to one that has not exited after ``stop_timeout_s``. No orphans: each child is started with
PR_SET_PDEATHSIG, so if the supervisor is killed, even by SIGKILL, the kernel sends every child SIGTERM (the same
clean shutdown). The children run in their own process groups so that a terminal's Ctrl-C reaches them once,
through the supervisor.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import rclpy
import yaml
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.task import Future

from oxygen_ros import share, simulation
from oxygen_ros.nodes.spin import EXIT_ON_REFUSAL

LOGGER = rclpy.logging.get_logger("oxygen_supervisor")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before any fork: the child only calls it
PROBE_S = 2.0  # how long one lifecycle get_state probe may take before it is sent again


@dataclass(frozen=True)
class NodeSpec:
    """One node of the graph: its name, its executable, whether it is a lifecycle node to configure and activate
    after each start, the namespace it is moved into ('' = none; several inference nodes side by side, each
    with its own pool) and more ROS arguments for it (remappings, ``("-r", "from:=to")``: a task node pointed at
    another namespace's inference node). Its section in the YAML is its name, a namespaced node's its fully
    qualified name."""

    name: str
    executable: str
    lifecycle: bool = False
    namespace: str = ""
    arguments: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.namespace.startswith("/") or self.namespace.endswith("/"):
            raise ValueError(f"namespace {self.namespace!r}: give it without leading or trailing '/'")

    @property
    def fully_qualified_name(self) -> str:
        return f"/{self.namespace}/{self.name}" if self.namespace else f"/{self.name}"

    @property
    def key(self) -> str:
        """Its name in ``pids()``, ``restarts()`` and the YAML: the name, or the fully qualified name when namespaced."""
        return self.fully_qualified_name if self.namespace else self.name


def graph(robot: str = simulation.ROBOTS[0]) -> tuple[NodeSpec, ...]:
    """The nodes of launch/oxygen.launch.py with `use_sim:=true sim_robot:=<robot>`; ValueError naming an unknown
    robot."""
    arms = tuple(NodeSpec(arm.name, arm.executable) for arm in simulation.controllers(robot))
    return (NodeSpec("oxygen_inference", "inference_node", lifecycle=True), NodeSpec("camera_sim", "camera_sim"),
            *arms, *(NodeSpec(name, name) for name in simulation.TASK_NODES))  # fmt: skip


GRAPH = graph()  # the simulated SO-100's


@dataclass(frozen=True)
class RestartPolicy:
    first_delay_s: float = 0.5
    max_delay_s: float = 8.0
    per_minute: int = 5

    def delay(self, recent: int) -> float | None:
        """Seconds to wait before the next start after ``recent`` restarts in the last minute; None: give up."""
        if recent >= self.per_minute:
            return None
        return min(self.first_delay_s * 2**recent, self.max_delay_s)


@dataclass
class _Child:
    spec: NodeSpec
    process: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)  # monotonic times of the restarts
    up: threading.Event = field(default_factory=threading.Event)  # first started (a lifecycle node: and active, or not)
    up_ok: bool = False
    thread: threading.Thread | None = None

    def recent_restarts(self, now: float) -> int:
        return sum(1 for t in self.restarts if now - t < 60.0)


def _dies_with(parent: int) -> Callable[[], None]:
    """preexec_fn of a child: its own process group (a terminal's Ctrl-C reaches the supervisor alone, which stops
    the nodes in order; Popen's process_group needs Python 3.11), SIGTERM when the supervisor dies; exit if it is
    already gone. SIGINT and SIGTERM back to their defaults: an ignored one (a supervisor started by a script's `&`,
    or from a process that stopped a node in it) would stay ignored through exec until the node installs its own,
    so a supervisor killed while the node starts would leave it running for good."""

    def preexec() -> None:
        os.setpgid(0, 0)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class _NoAliases(yaml.SafeDumper):
    """Writes a value given twice (one dict of overrides for several nodes) twice: rcl's parser refuses YAML aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _exit_reason(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"


class Supervisor:
    """``with Supervisor(config) as graph:`` every node of ``nodes`` runs (the inference node configured and
    active, with ``autostart``) until the block ends; ``pids()`` and ``restarts()`` say what runs now and how often
    each restarted, by each node's ``key`` (its name; a namespaced node's fully qualified name).

    ``overrides`` maps a node's key to parameters that replace the file's; ``output`` receives every child's stdout
    and stderr (None: this process's own, like ``output='screen'``)."""

    def __init__(
        self,
        config: Path | None = None,
        overrides: dict[str, dict[str, Any]] | None = None,
        nodes: tuple[NodeSpec, ...] = GRAPH,
        policy: RestartPolicy = RestartPolicy(),
        output: IO | None = None,
        startup_timeout_s: float = 300.0,
        stop_timeout_s: float = 30.0,
        autostart: bool = True,
    ) -> None:
        self.config = share.parameter_file(config)
        for spec in nodes:
            if not os.access(share.node_executable(spec.executable), os.X_OK):
                raise FileNotFoundError(f"{share.node_executable(spec.executable)} is not installed (make install)")
        self.policy, self.startup_timeout_s, self.stop_timeout_s = policy, startup_timeout_s, stop_timeout_s
        self.autostart = autostart
        self._children = {spec.key: _Child(spec) for spec in nodes}
        if len(self._children) < len(nodes):
            raise ValueError("two nodes of the graph have the same fully qualified name")
        if unknown := sorted(set(overrides or {}) - set(self._children)):  # a namespaced node's key is its full name
            raise ValueError(f"overrides for nodes the graph does not have: {', '.join(unknown)}")
        self._output = output
        self._folder = Path(tempfile.mkdtemp(prefix="oxygen_supervisor_"))
        self._params = [str(self.config)]
        if overrides:
            sections = {name: {"ros__parameters": values} for name, values in overrides.items()}
            (self._folder / "overrides.yaml").write_text(yaml.dump(sections, Dumper=_NoAliases))
            self._params.append(str(self._folder / "overrides.yaml"))
        self._env = dict(os.environ) | share.dds_profile_env(os.environ)
        self._lock = threading.Lock()  # a process is started, or the supervisor stops, never both at once
        self._stopping = threading.Event()
        self.failed = threading.Event()  # set when a node is given up on; ``failure`` says which and why
        self.failure = ""
        self._context = Context()
        rclpy.init(context=self._context)  # a context of its own: no signal handlers (the caller's are kept)
        self._node = Node("oxygen_supervisor", context=self._context)
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self._node)
        self._bring_up_lock = threading.Lock()  # one thread spins the supervisor's node at a time

    # --- what callers use -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start every node; return once the lifecycle nodes are active (with ``autostart``; started, without).
        RuntimeError (after stopping what was started) when one cannot be brought up the first time: its log says
        why (a missing model, a bad parameter); later failures are restarted instead."""
        try:
            for child in self._children.values():
                child.thread = threading.Thread(target=self._keep, args=(child,), name=f"keep-{child.spec.key}")
                child.thread.start()
            for child in self._children.values():
                while not child.up.wait(0.2):  # short waits: Ctrl-C is handled meanwhile
                    pass
                if not child.up_ok:
                    raise RuntimeError(f"{child.spec.key} could not be configured and activated; its log says why")
        except BaseException:
            self.stop()
            raise

    def pids(self) -> dict[str, int]:
        """The process id of every node running now, by key."""
        return {
            name: child.process.pid
            for name, child in self._children.items()
            if child.process is not None and child.process.poll() is None
        }

    def restarts(self) -> dict[str, int]:
        return {name: len(child.restarts) for name, child in self._children.items()}

    def stop(self) -> None:
        """SIGINT to every node, SIGKILL to those still running after ``stop_timeout_s``; idempotent."""
        with self._lock:
            self._stopping.set()
            running = [c.process for c in self._children.values() if c.process and c.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + self.stop_timeout_s
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                LOGGER.warning(f"pid {process.pid} did not stop within {self.stop_timeout_s:g} s: SIGKILL")
                process.kill()
                process.wait()
        for child in self._children.values():
            if child.thread is not None and child.thread is not threading.current_thread():
                child.thread.join()
        if self._context.ok():
            self._executor.shutdown()
            self._node.destroy_node()
            rclpy.try_shutdown(context=self._context)
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> "Supervisor":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- keeping one node running -----------------------------------------------------------------------------
    def _keep(self, child: _Child) -> None:
        """Start the node, wait for it to exit, start it again (this thread started the process, so it must outlive
        it: PR_SET_PDEATHSIG fires when the thread that forked exits)."""
        spec = child.spec
        while (process := self._spawn(child)) is not None:
            up = self._bring_up(spec, process) if spec.lifecycle and self.autostart else True
            if not child.up.is_set():
                child.up_ok = up
                child.up.set()
            if not up and process.poll() is None and not self._stopping.is_set():
                LOGGER.error(f"{spec.key} (pid {process.pid}) could not be configured and activated: stopping it")
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
            code = process.wait()
            if self._stopping.is_set() or not child.up_ok:
                return  # stopped by the supervisor, or never came up at all: start() reports it
            now = time.monotonic()
            delay = self.policy.delay(child.recent_restarts(now))
            if delay is None:
                self.failure = f"{spec.key} exited {self.policy.per_minute + 1} times within a minute; giving up"
                LOGGER.error(f"{spec.key} (pid {process.pid}) exited with {_exit_reason(code)}: {self.failure}")
                self.failed.set()
                return
            child.restarts.append(now)
            LOGGER.warning(
                f"{spec.key} (pid {process.pid}) exited with {_exit_reason(code)}; restarting it in {delay:g} s "
                f"(restart {len(child.restarts)}, {child.recent_restarts(now)} in the last minute)"
            )
            if self._stopping.wait(delay):
                return

    def _spawn(self, child: _Child) -> subprocess.Popen | None:
        command = [str(share.node_executable(child.spec.executable)), EXIT_ON_REFUSAL, "--ros-args",
                   "-r", f"__node:={child.spec.name}"]  # fmt: skip
        if child.spec.namespace:
            command += ["-r", f"__ns:=/{child.spec.namespace}"]
        command += child.spec.arguments
        for path in self._params:
            command += ["--params-file", path]
        with self._lock:
            if self._stopping.is_set():
                child.up.set()
                return None
            child.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._output,
                stderr=None if self._output is None else subprocess.STDOUT,
                env=self._env,
                preexec_fn=_dies_with(os.getpid()),
            )
        LOGGER.info(f"started {child.spec.key} (pid {child.process.pid})")
        return child.process

    def _bring_up(self, spec: NodeSpec, process: subprocess.Popen) -> bool:
        """Configure and activate a lifecycle node once its services answer; False if it cannot be (or dies,
        or the supervisor stops meanwhile)."""
        with self._bring_up_lock:  # one at a time: each node's budget starts when its turn does
            deadline = time.monotonic() + self.startup_timeout_s
            probe = self._node.create_client(GetState, f"{spec.fully_qualified_name}/get_state")
            change = self._node.create_client(ChangeState, f"{spec.fully_qualified_name}/change_state")
            try:
                state = None
                while state is None:  # a request sent before the new process's server is matched is lost: probe
                    if process.poll() is not None or self._stopping.is_set() or time.monotonic() > deadline:
                        return False
                    state = self._call(probe, GetState.Request(), process, min(deadline, time.monotonic() + PROBE_S))
                for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
                    result = self._call(change, ChangeState.Request(transition=Transition(id=transition)), process,
                                        deadline)  # fmt: skip
                    if result is None or not result.success:
                        return False
                LOGGER.info(f"{spec.key} (pid {process.pid}) is active (it was {state.current_state.label})")
                return True
            finally:
                self._node.destroy_client(probe)
                self._node.destroy_client(change)

    def _call(self, client, request: Any, process: subprocess.Popen, until: float) -> Any:
        """The response, or None when ``until`` (monotonic) passes, the process exits or the supervisor stops."""
        future: Future = client.call_async(request)
        while not future.done():
            if process.poll() is not None or self._stopping.is_set() or time.monotonic() > until:
                client.remove_pending_request(future)
                return None
            self._executor.spin_until_future_complete(future, timeout_sec=0.1)
        return future.result()
