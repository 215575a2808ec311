"""What a simulated bringup sets over config/oxygen.yaml, whose defaults are a real robot's: the task nodes trust
the OpenCV detector (its scene is camera_sim's), the navigation node drives camera_sim's base itself (no nav2 there;
camera_sim's laser scan and the detector are its live obstacle sources), and a random-weight model may send action
chunks (they move only the simulated arm). The simulated arm is a LeRobot SO-100 as ros2_control runs one (what
config/sim_arm.urdf describes): its five arm joints on a FollowJointTrajectory controller (``arm_sim``) and the jaw on
its own GripperCommand controller (``gripper_sim``), and the instruction node maps a VLA's six action dimensions onto
them, so a checkpoint trained on an SO-100 closes the loop in simulation as on the arm. `oxygen-ros up` and `demo`
always simulate; the launch file does with `use_sim:=true`."""

from typing import Any

TASK_NODES = ("vqa_node", "instruction_node", "navigation_node")
ARM_NODES = ("arm_sim", "gripper_sim")  # the simulated SO-100's two controllers
SO100_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")  # LeRobot's
JAW = "gripper"
INFERENCE = {"allow_random_weights": True}
TASK = {"use_sim": True}
NAVIGATION = TASK | {"nav2": "never", "allow_builtin_driver": True}
INSTRUCTION = TASK | {"action_joint_names": list(SO100_JOINTS), "state_joint_names": list(SO100_JOINTS),
                      "gripper_joint_names": [JAW], "gripper_max_effort": 10.0}  # fmt: skip
ARM = {"joint_names": [j for j in SO100_JOINTS if j != JAW], "initial_positions": [0.0] * (len(SO100_JOINTS) - 1)}


def parameters() -> dict[str, dict[str, Any]]:
    """Per node name, the parameters a simulated bringup adds."""
    tasks = {name: dict(TASK) for name in TASK_NODES} | {"navigation_node": dict(NAVIGATION),
                                                         "instruction_node": dict(INSTRUCTION)}  # fmt: skip
    return {"oxygen_inference": dict(INFERENCE)} | tasks | {"arm_sim": dict(ARM)}
