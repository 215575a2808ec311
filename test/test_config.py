"""config/oxygen.yaml is complete ROS parameter YAML, and README.md documents exactly its parameters."""

import re
import sys
from pathlib import Path

import yaml

README = Path(__file__).parents[1] / "README.md"
CONFIG = Path(sys.prefix) / "share" / "oxygen_ros" / "config" / "oxygen.yaml"


def _as_yaml(value) -> str:
    """The value as the README shows it: YAML spelling for booleans and the empty string."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if value != "" else '""'


def test_config_is_ros_parameter_yaml():
    config = yaml.safe_load(CONFIG.read_text())
    for node, section in config.items():
        assert set(section) == {"ros__parameters"}, node
        for name, value in section["ros__parameters"].items():
            assert isinstance(value, bool | int | float | str), f"{node}.{name}: {value!r}"


def test_readme_documents_every_parameter_and_default():
    config = yaml.safe_load(CONFIG.read_text())
    in_config = {
        (node, name, _as_yaml(value))
        for node, section in config.items()
        for name, value in section["ros__parameters"].items()
    }
    in_readme = set(re.findall(r"^\| (\w+) \| `(\w+)` \| `([^`]*)` \|", README.read_text(), re.MULTILINE))
    assert in_readme == in_config
