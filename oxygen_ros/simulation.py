"""What a simulated bringup sets over config/oxygen.yaml, whose defaults are a real robot's: the task nodes trust
the OpenCV detector (its scene is camera_sim's), the navigation node drives camera_sim's base itself (no nav2 there;
camera_sim's laser scan and the detector are its live obstacle sources), and a random-weight model may send action
chunks (they move only the simulated arm). `oxygen-ros up` and `demo` always simulate; the launch file does with
`use_sim:=true`."""

from typing import Any

TASK_NODES = ("vqa_node", "instruction_node", "navigation_node")
INFERENCE = {"allow_random_weights": True}
TASK = {"use_sim": True}
NAVIGATION = TASK | {"nav2": "never", "allow_builtin_driver": True}


def parameters() -> dict[str, dict[str, Any]]:
    """Per node name, the parameters a simulated bringup adds."""
    tasks = {name: dict(TASK) for name in TASK_NODES} | {"navigation_node": dict(NAVIGATION)}
    return {"oxygen_inference": dict(INFERENCE)} | tasks
