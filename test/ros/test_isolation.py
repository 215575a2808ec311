"""Concurrent test sessions get different ROS domains, and nothing crosses domains."""

import subprocess
import sys
from pathlib import Path

from rclpy.node import Node
from ros_harness import acquire_domain_id, make_context

from oxygen_ros.srv import GetPoolStats

TEST_DIR = Path(__file__).parents[1]


def test_concurrent_sessions_get_distinct_domains(ros_domain_id):
    """Another process leasing an id while this session holds one (as a second `make test` would) gets another."""
    lease = subprocess.run(
        [sys.executable, "-c", "from ros_harness import acquire_domain_id; print(acquire_domain_id().domain_id)"],
        cwd=TEST_DIR, capture_output=True, text=True, check=True,
    )  # fmt: skip
    other = int(lease.stdout)
    assert other != ros_domain_id
    second = acquire_domain_id()
    assert second.domain_id != ros_domain_id
    second.release()


def test_service_invisible_from_other_domain(ros_context):
    lease = acquire_domain_id()
    other_context = make_context(lease.domain_id)
    server = Node("isolation_server", context=ros_context)
    server.create_service(GetPoolStats, "/isolation_probe", lambda request, response: response)
    same_domain = Node("isolation_same", context=ros_context)
    other_domain = Node("isolation_other", context=other_context)
    try:
        assert same_domain.create_client(GetPoolStats, "/isolation_probe").wait_for_service(timeout_sec=10.0)
        assert not other_domain.create_client(GetPoolStats, "/isolation_probe").wait_for_service(timeout_sec=2.0)
        # Graph queries, not just the client: no server and no node of domain A shows up in domain B.
        assert (same_domain.count_services("/isolation_probe"), other_domain.count_services("/isolation_probe")) == (
            1,
            0,
        )
        assert "isolation_server" in same_domain.get_node_names()
        assert "isolation_server" not in other_domain.get_node_names()
    finally:
        for node in (server, same_domain, other_domain):
            node.destroy_node()
        other_context.try_shutdown()
        lease.release()
