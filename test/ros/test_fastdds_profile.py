"""config/fastdds_profile.xml, the Fast DDS defaults `oxygen-ros up` gives its node processes: Fast DDS loads it
without a parse error (a bad element makes it drop the whole profile, silently for the node but for a log line) and a
node process under it serves; its service reply writers wait for a late-matching client instead of dropping the reply
after Fast DDS's 100 ms."""

import xml.etree.ElementTree as ET
from pathlib import Path

from rclpy.node import Node
from ros_harness import call_service, node_process, spin_nodes

from oxygen_ros.share import dds_profile
from oxygen_ros.srv import Infer

ECHO_SERVERS = Path(__file__).parents[1] / "echo_servers.py"
NS = {"dds": "http://www.eprosima.com"}


def _seconds(duration: ET.Element) -> float:
    return float(duration.findtext("dds:sec", "0", NS)) + float(duration.findtext("dds:nanosec", "0", NS)) * 1e-9


def test_the_installed_profile_sets_the_lease_and_the_reply_wait():
    root = ET.parse(dds_profile()).getroot()
    participant = root.find("dds:profiles/dds:participant[@is_default_profile='true']", NS)
    discovery = participant.find("dds:rtps/dds:builtin/dds:discovery_config", NS)
    assert _seconds(discovery.find("dds:leaseDuration", NS)) == 2.0
    assert _seconds(discovery.find("dds:leaseAnnouncement", NS)) == 0.5
    # rmw_fastrtps gives every service's reply writer the data_writer profile named "service"
    service = root.find("dds:profiles/dds:data_writer[@profile_name='service']", NS)
    assert _seconds(service.find("dds:qos/dds:reliability/dds:max_blocking_time", NS)) >= 1.0


def test_a_node_process_under_the_profile_loads_it_and_serves(ros_context, monkeypatch):
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", str(dds_profile()))
    with node_process([str(ECHO_SERVERS)], ros_context, Infer, "/oxygen/infer") as server:
        node = Node("fastdds_profile_client", context=ros_context)
        with spin_nodes(ros_context, node):
            request = Infer.Request(task_id="p1", task_type="generic", prompt="hello", want_text=True)
            assert call_service(node, Infer, "/oxygen/infer", request).text == "echo: hello"
        log = server.log()
    assert "XMLPARSER" not in log and "Error" not in log, log
