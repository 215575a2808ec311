"""`oxygen-ros ask | instruct | navigate | stats` as a user runs them: separate processes talking to a running graph
(`oxygen-ros up`'s Graph, here in-process on this session's domain: the inference node with SmolLM2, camera_sim and
the three task nodes), and a clear one-line failure with exit status 69 within seconds when no graph is running."""

import argparse
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from oxygen_ros.bringup import Graph
from oxygen_ros.cli.options import namespace
from oxygen_ros.cli.stats import format_stats
from oxygen_ros.srv import GetPoolStats
from rclpy.node import Node
from ros_harness import acquire_domain_id, call_service

OXYGEN_ROS = str(Path(sys.prefix) / "bin" / "oxygen-ros")
NOT_RUNNING = {
    ("ask", "hi"): "/vqa/ask action server",
    ("instruct", "go"): "/follow_instruction action server",
    ("navigate", "--x", "1", "--y", "2"): "/navigate action server",
    ("stats",): "/oxygen/get_pool_stats service",
    ("stats", "--namespace", "robot7"): "/robot7/oxygen/get_pool_stats service",  # a namespaced robot's
    ("ask", "hi", "--namespace", "robot7"): "/robot7/vqa/ask action server",
    ("instruct", "go", "--namespace", "/robot7/"): "/robot7/follow_instruction action server",
    ("navigate", "--x", "1", "--y", "2", "--namespace", "robot7"): "/robot7/navigate action server",
}


def oxygen_ros(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([OXYGEN_ROS, *args], capture_output=True, text=True, timeout=timeout)


def test_every_client_says_when_no_graph_is_running():
    lease = acquire_domain_id()  # a domain nobody serves, whatever other tests run
    env = os.environ | {"ROS_DOMAIN_ID": str(lease.domain_id), "OMP_NUM_THREADS": "1"}
    try:
        start = time.monotonic()
        procs = {
            args: subprocess.Popen(
                [OXYGEN_ROS, *args, "--timeout", "1"],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )  # fmt: skip
            for args in NOT_RUNNING
        }
        outputs = {args: proc.communicate(timeout=60) for args, proc in procs.items()}
        elapsed = time.monotonic() - start
    finally:
        lease.release()
    for args, (stdout, stderr) in outputs.items():
        assert procs[args].returncode == 69, (args, stderr)
        assert (
            stderr
            == f"error: no {NOT_RUNNING[args]}: is `oxygen-ros up` (or `ros2 launch oxygen_ros oxygen.launch.py`) running?\n"
        )
        assert stdout == ""
    assert elapsed < 30, f"{len(procs)} clients took {elapsed:.0f} s to give up"


def test_a_namespace_is_written_as_ros_writes_it_or_refused_by_name():
    assert [namespace(ns) for ns in ("", "/", " robot1 ", "/robot1/", "fleet/robot_2")] == [
        "", "", "/robot1", "/robot1", "/fleet/robot_2"]  # fmt: skip
    for bad in ("robot-1", "1robot", "fleet//robot1"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a ROS name token"):
            namespace(bad)
    result = oxygen_ros("ask", "hi", "--namespace", "robot-1", "--timeout", "1")
    assert result.returncode == 2 and "namespace 'robot-1'" in result.stderr, result.stderr


@pytest.fixture(scope="module")
def graph(ros_domain_id):
    with Graph(overrides={"kv_cache_bytes": 64 << 20}, domain_id=ros_domain_id) as graph:
        graph.client = graph.add_client("cli_test_probe")
        yield graph


def test_ask_prints_the_answer_reuse_and_latency(graph):
    result = oxygen_ros("ask", "What objects are on the table?", "--max-new-tokens", "32", "--timeout", "10")
    assert result.returncode == 0, result.stderr
    *lines, stats = result.stdout.strip().splitlines()  # the answer (streamed; it may span lines), then the stats
    answer = "\n".join(lines)
    assert re.search(r"triangle|circle|star|square|pentagon", answer), answer  # read from the describer's text
    match = re.fullmatch(r"\(about observation obs-[0-9a-f]{16}, (\d+) prompt tokens reused from the shared pool, "
                         r"(\d+) ms\)", stats)  # fmt: skip
    assert match and int(match[2]) > 0, stats


def test_stats_prints_the_pool_the_node_reports(graph):
    result = oxygen_ros("stats", "--timeout", "10")
    assert result.returncode == 0, result.stderr
    snapshot = call_service(graph.client, GetPoolStats, "/oxygen/get_pool_stats", GetPoolStats.Request()).stats
    assert snapshot.total_blocks > 0 and snapshot.active_requests == 0  # idle: the counts cannot move in between
    out = result.stdout
    assert out == format_stats(snapshot) + "\n"
    used = snapshot.total_blocks - snapshot.free_blocks - snapshot.cached_blocks
    counts = {"free": snapshot.free_blocks, "cached": snapshot.cached_blocks, "used": used,
              "shared": snapshot.shared_blocks}  # fmt: skip
    for label, value in counts.items():
        assert re.search(rf"^  {label} +{value}\b", out, re.M), label
    assert f"{snapshot.total_blocks} blocks of {snapshot.block_size} tokens" in out
    assert f"prefix hit rate {snapshot.prefix_hit_rate:.2f}" in out
    assert snapshot.tiers and all(re.search(rf"^  {t.name} +{t.blocks} ", out, re.M) for t in snapshot.tiers)


def test_instruct_streams_chunks_and_reports_the_rate(graph):
    result = oxygen_ros("instruct", "pick up the red triangle", "--rate", "10", "--duration", "2", "--timeout", "10")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^\[ *[\d.]+ s\] chunk +\d+ ", result.stdout, re.M), result.stdout
    done = re.search(r"^done: (\d+) chunks, ([\d.]+) Hz achieved of 10 Hz requested$", result.stdout, re.M)
    assert done and int(done[1]) > 0 and float(done[2]) > 0, result.stdout


def test_a_bad_request_is_printed_and_exits_2(graph):
    result = oxygen_ros("instruct", "pick up the red triangle", "--rate", "-1", "--timeout", "10")
    assert result.returncode == 2 and "rate" in result.stderr, result.stdout + result.stderr


def _stream_then_interrupt(args: list[str], first_line: str) -> tuple[int, str]:
    """Start a client, wait for a feedback line matching ``first_line``, press Ctrl-C; (status, all stdout)."""
    proc = subprocess.Popen([OXYGEN_ROS, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, deadline = "", time.monotonic() + 60
    try:
        while not re.search(first_line, seen, re.M):
            assert time.monotonic() < deadline and proc.poll() is None, seen
            if select.select([proc.stdout], [], [], 0.5)[0]:
                seen += proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, seen + rest


def test_ctrl_c_cancels_an_endless_instruction(graph):
    status, out = _stream_then_interrupt(["instruct", "wave", "--duration", "0"], r"chunk +\d+")
    assert status == 130 and re.search(r"^cancelled: \d+ chunks", out, re.M), out


def test_navigate_streams_distance_and_ctrl_c_cancels(graph):
    status, out = _stream_then_interrupt(["navigate", "--x", "0.5", "--y", "3.5", "--instruction", "go slowly"],
                                         r"m to go")  # fmt: skip
    assert status == 130 and re.search(r"^cancelled: [\d.]+ m from the target", out, re.M), out


def test_a_namespace_reaches_that_robots_servers(graph):
    """`--namespace robot7` asks /robot7/oxygen/get_pool_stats (a stand-in server there), not the root graph's."""
    node = graph.add(Node("pool_stats_stand_in", namespace="robot7", context=graph.context))

    def answer(request: GetPoolStats.Request, response: GetPoolStats.Response) -> GetPoolStats.Response:
        response.stats.total_blocks, response.stats.free_blocks, response.stats.block_size = 77, 77, 16
        return response

    node.create_service(GetPoolStats, "oxygen/get_pool_stats", answer)
    result = oxygen_ros("stats", "--namespace", "robot7", "--timeout", "10")
    assert result.returncode == 0, result.stderr
    assert "77 blocks of 16 tokens" in result.stdout
