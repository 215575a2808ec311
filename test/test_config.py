"""config/oxygen.yaml is complete ROS parameter YAML, and README.md documents exactly its parameters and the model
presets of config/models, each key of which is a parameter of that table."""

import re
import sys
from pathlib import Path

import yaml

from oxygen_ros.nodes.presets import KEYS

README = Path(__file__).parents[1] / "README.md"
CONFIG = Path(sys.prefix) / "share" / "oxygen_ros" / "config" / "oxygen.yaml"
PRESETS = CONFIG.parent / "models"
PARAMETER_ROW = re.compile(r"^\| (\w+) \| `(\w+)` \| `([^`]*)` \|", re.MULTILINE)
PRESET_ROW = re.compile(r"^\| `([\w.-]+)` \| (.+?) \| [^|]+ \|$", re.MULTILINE)


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
    in_readme = set(PARAMETER_ROW.findall(README.read_text()))
    assert in_readme == in_config


def test_readme_documents_every_preset_and_its_values_and_they_are_table_parameters():
    text = README.read_text()
    section = text[text.index("### Model presets") :].split("\n## ", 1)[0]
    in_readme = {name: dict(re.findall(r"`(\w+): ([^`]*)`", values)) for name, values in PRESET_ROW.findall(section)}
    installed = {path.stem: yaml.safe_load(path.read_text()) for path in sorted(PRESETS.glob("*.yaml"))}
    assert in_readme == {name: {k: _as_yaml(v) for k, v in values.items()} for name, values in installed.items()}
    documented = {name for node, name, _ in PARAMETER_ROW.findall(text) if node == "oxygen_inference"}
    assert set(KEYS) <= documented, f"preset keys missing from the parameter table: {set(KEYS) - documented}"
