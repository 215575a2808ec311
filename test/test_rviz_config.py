"""config/oxygen.rviz (rviz2 is not installable here): every display must be a real rviz_default_plugins class
subscribed to a topic that one of our nodes publishes, with the message type that display draws; and the file must
be installed where the README's `rviz2 -d` command looks. Its topics are relative, as our nodes' are: rviz2 started in
a robot's namespace (`--ros-args -r __ns:=/robot1`) shows that robot's."""

import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).parents[1]
RVIZ = REPO / "config" / "oxygen.rviz"
# rviz_default_plugins' display classes (plugins_description.xml, Jazzy/Kilted) and the message each one draws;
# displays without a topic (Grid, Axes) draw none.
DISPLAYS = {
    "Axes": None, "Grid": None, "TF": None, "RobotModel": None,
    "Camera": "Image", "Image": "Image", "Marker": "Marker", "MarkerArray": "MarkerArray", "Path": "Path",
    "Odometry": "Odometry", "Pose": "PoseStamped", "PoseArray": "PoseArray", "PointCloud2": "PointCloud2",
    "LaserScan": "LaserScan", "Map": "OccupancyGrid", "TwistStamped": "TwistStamped",
}  # fmt: skip
# create_publisher(Type, "topic", ...) and parameter tables of the form "x_topic": ("topic", "pkg/Type output ...");
# names are relative (a namespaced bringup moves them), and so are rviz's: compared as a bringup without one has them
PUBLISHER = re.compile(r'create_(?:lifecycle_)?publisher\(\s*(\w+),\s*"([^"]+)"')
OUTPUT_PARAMETER = re.compile(r'"\w+_topic":\s*\(\s*"([^"]+)",\s*"\w+/(\w+) output')


def _absolute(topic: str) -> str:
    return topic if topic.startswith("/") else f"/{topic}"


def published_topics() -> dict[str, str]:
    """{topic: message type} for what the nodes in oxygen_ros/nodes publish, read from their sources."""
    topics: dict[str, str] = {}
    for source in (REPO / "oxygen_ros" / "nodes").glob("*.py"):
        text = source.read_text()
        topics |= {_absolute(topic): msg_type for msg_type, topic in PUBLISHER.findall(text)}
        topics |= {_absolute(topic): msg_type for topic, msg_type in OUTPUT_PARAMETER.findall(text)}
    return topics


def displays() -> list[dict]:
    return yaml.safe_load(RVIZ.read_text())["Visualization Manager"]["Displays"]


def test_the_scan_finds_the_inference_node_and_camera_outputs():
    topics = published_topics()
    assert topics["/oxygen/pool_markers"] == "MarkerArray" and topics["/oxygen/pool_image"] == "Image"
    assert topics["/camera/image_raw"] == "Image"


def test_every_display_is_a_default_plugin_on_a_topic_we_publish():
    topics = published_topics()
    for display in displays():
        package, _, name = display["Class"].partition("/")
        assert package == "rviz_default_plugins" and name in DISPLAYS, display["Class"]
        if DISPLAYS[name] is None:
            assert "Topic" not in display, display["Name"]
            continue
        relative = display["Topic"]["Value"]
        assert not relative.startswith("/"), f"{display['Name']}: {relative} is absolute: a namespace would not move it"
        topic = _absolute(relative)
        assert topic in topics, f"{display['Name']}: no node of ours publishes {topic}"
        assert topics[topic] == DISPLAYS[name], f"{display['Name']}: {topic} carries {topics[topic]}"


def test_the_simulated_arm_is_drawn_from_the_latched_description_our_arm_sim_publishes():
    (model,) = [d for d in displays() if d["Class"] == "rviz_default_plugins/RobotModel"]
    topic = model["Description Topic"]
    assert model["Description Source"] == "Topic" and topic["Value"] == "robot_description"  # relative, as ours
    assert topic["Durability Policy"] == "Transient Local"  # latched: published once, as robot_state_publisher does
    assert published_topics()["/robot_description"] == "String"


def test_the_view_shows_the_pool_the_path_and_both_images_in_the_map_frame():
    config = yaml.safe_load(RVIZ.read_text())["Visualization Manager"]
    assert config["Global Options"]["Fixed Frame"] == "map"
    shown = {(d["Class"].split("/")[1], d["Topic"]["Value"]) for d in config["Displays"] if "Topic" in d}
    assert shown == {
        ("MarkerArray", "oxygen/pool_markers"), ("Image", "oxygen/pool_image"), ("Image", "camera/image_raw"),
        ("Path", "plan"),
    }  # fmt: skip
    camera = next(d for d in config["Displays"] if d.get("Topic", {}).get("Value") == "camera/image_raw")
    assert camera["Topic"]["Reliability Policy"] == "Best Effort"  # camera_sim publishes with sensor-data QoS


def test_the_config_is_installed_beside_oxygen_yaml():
    installed = Path(sys.prefix) / "share" / "oxygen_ros" / "config" / "oxygen.rviz"
    assert installed.read_text() == RVIZ.read_text()
