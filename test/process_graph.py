"""The whole graph as on the robot, for tests: `oxygen-ros up` in a subprocess (a process per node, supervised) on
this session's ROS domain, with the installed config/oxygen.yaml changed by ``changes`` (node -> parameters).

A test reads each node's process id and resident memory from /proc, kills processes, and at the end stops the
graph with SIGTERM, as systemd or a terminal's Ctrl-C would; ``stop`` returns the exit status and leaves no
process behind.
"""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from ros_harness import clean_fastdds_shm

from oxygen_ros.nodes.polling import poll_until

OXYGEN_ROS = Path(sys.prefix) / "bin" / "oxygen-ros"
CONFIG = Path(sys.prefix) / "share" / "oxygen_ros" / "config" / "oxygen.yaml"
EXECUTABLES = ("inference_node", "camera_sim", "arm_sim", "gripper_sim", "vqa_node", "instruction_node", "navigation_node")
START_S = 240  # five interpreters importing torch and a model load, on two cores shared with other tests
STOP_S = 60


def child_pids(parent: int) -> dict[str, int]:
    """The node processes whose parent is ``parent``, by executable name (the launcher in their command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # exited meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        name = Path(argv[1].decode()).name if len(argv) > 1 else ""
        if ppid == parent and name in EXECUTABLES:
            found[name] = int(entry.name)
    return found


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` (VmRSS) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"no VmRSS for pid {pid}")


@dataclass
class ProcessGraph:
    process: subprocess.Popen
    log_path: Path

    def pids(self) -> dict[str, int]:
        return child_pids(self.process.pid)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_pid(self, name: str, other_than: int = 0, timeout: float = 30.0) -> int:
        """The pid of ``name`` once it runs (and is not ``other_than``, e.g. the pid killed)."""
        def new_pid() -> int | None:
            pid = self.pids().get(name, other_than)
            return None if pid == other_than else pid

        def exited() -> str:
            return "" if self.process.poll() is None else f"oxygen-ros up exited:\n{self.log()[-4000:]}"

        return poll_until(new_pid, timeout, lambda: f"{name} running:\n{self.log()[-4000:]}", period_s=0.1,
                          given_up=exited)  # fmt: skip

    def stop(self) -> int:
        """SIGTERM `oxygen-ros up`; its exit status once it and every node process have exited."""
        children = self.pids()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            code = None
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in children.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in children.values() if _alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert code is not None and not left, f"oxygen-ros up did not stop (left {left}):\n{self.log()[-4000:]}"
        return code


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def process_graph(tmp_path: Path, changes: dict[str, dict], arguments: tuple[str, ...] = ()) -> Iterator[ProcessGraph]:
    """`oxygen-ros up --config` the installed config with ``changes`` (and more ``arguments``, e.g. `--preset`),
    once it printed that it is up."""
    config = yaml.safe_load(CONFIG.read_text())
    for node, parameters in changes.items():
        config[node]["ros__parameters"].update(parameters)
    (tmp_path / "oxygen.yaml").write_text(yaml.safe_dump(config))
    log_path = tmp_path / "up.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(OXYGEN_ROS), "up", "--config", str(tmp_path / "oxygen.yaml"), *arguments],
            stdout=log, stderr=subprocess.STDOUT, env=os.environ | {"OMP_NUM_THREADS": "1"},
        )  # fmt: skip
    graph = ProcessGraph(process, log_path)
    try:
        deadline = time.monotonic() + START_S
        while "oxygen_ros is up" not in graph.log():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"oxygen-ros up did not come up (status {process.poll()}):\n{graph.log()}")
            time.sleep(0.2)
        yield graph
    finally:
        if process.poll() is None:
            graph.stop()
        clean_fastdds_shm()  # the tests SIGKILL nodes: their shared memory stays behind
