"""A parameter file moved into a namespace, for the launch file's `namespace:=robot1`.

rcl gives a node the sections of a parameter file whose key is ``/**`` or the node's fully qualified name, and reads
a bare key (config/oxygen.yaml's ``navigation_node:``) as ``/navigation_node``; rclpy on Humble matches nothing
else (``/**/navigation_node`` wildcards came in later releases). Under a namespace every bare section would be dropped
without a word and each node would run on its code defaults: the robot's speed limits, clearances and controller
names included. So the launch file hands its nodes the file with each bare key made ``/robot1/<key>``.
"""

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

SECTION = "ros__parameters"


def into_namespace(sections: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``sections`` (a parameter file's top level) with every bare node section (a plain node name holding
    ros__parameters) keyed by its fully qualified name in ``namespace`` ('' = the root). Other keys are kept as they
    are: absolute ones (``/**``, a full name), wildcards and relative paths (``**``, ``robot1/navigation_node``:
    rcl places them itself) and namespace-form nesting; where an absolute key names a moved section's node, its
    parameters are laid over the moved ones, one by one as rcl lays two sections (the robot's own over the shared
    defaults)."""
    prefix = "/" + namespace.strip("/") if namespace.strip("/") else ""
    out = {f"{prefix}/{key}": value for key, value in sections.items() if _bare(key, value)}
    for key, value in sections.items():
        if _bare(key, value):
            continue
        if key in out and isinstance(value, dict) and SECTION in value:
            out[key] = {**out[key], SECTION: _laid_over(out[key][SECTION] or {}, value[SECTION] or {})}
        else:
            out[key] = value
    return out


def _bare(key: str, value: Any) -> bool:
    """A node's section under its plain name, which rcl reads as the root namespace's node."""
    return not any(c in key for c in "/*") and isinstance(value, dict) and SECTION in value


def _laid_over(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over``'s parameters replacing ``under``'s, a nested group (``qos_overrides``) parameter by parameter."""
    out = dict(under)
    for name, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(name), dict)
        out[name] = _laid_over(out[name], value) if both else value
    return out


def written_into_namespace(path: str, namespace: str) -> str:
    """``path`` when ``namespace`` is the root, else a temporary copy of it moved ``into_namespace`` (launch_ros
    writes its dictionary parameters to temporary files the same way)."""
    if not namespace.strip("/"):
        return path
    sections = yaml.safe_load(Path(path).read_text()) or {}
    descriptor, moved = tempfile.mkstemp(prefix="oxygen_ros_", suffix=".yaml")
    with os.fdopen(descriptor, "w") as out:
        yaml.safe_dump(into_namespace(sections, namespace), out, sort_keys=False)
    return moved
