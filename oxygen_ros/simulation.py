"""What a simulated bringup sets over config/oxygen.yaml, whose defaults are a real robot's: the task nodes trust
the OpenCV detector (its scene is camera_sim's), the navigation node drives camera_sim's base itself (no nav2 there;
camera_sim's laser scan and the detector are its live obstacle sources), and a random-weight model may send action
chunks (they move only the simulated arm).

The simulated arm is one of ``ROBOTS``, each as ros2_control runs it, so a checkpoint trained on that robot closes the
loop in simulation as on the hardware:

- ``so100`` (the default): a LeRobot SO-100 (config/sim_arm.urdf), its five arm joints on a FollowJointTrajectory
  controller (``arm_sim``) and the jaw on its own GripperCommand controller (``gripper_sim``); the instruction node
  maps a VLA's six action dimensions onto them.
- ``bi_so100``: LeRobot's bimanual bi-SO-100 (config/sim_bimanual.urdf), two SO-100s with a trajectory controller
  and a gripper controller each (``left_arm_sim``, ``left_gripper_sim``, ``right_...``, serving
  ``left_arm_controller/follow_joint_trajectory`` and so on, as one controller manager names an ALOHA's); the
  instruction node maps twelve action dimensions, the left arm's six then the right's (LeRobot's BiSO100Follower
  order), onto the four.

`oxygen-ros up` and `demo` always simulate (`up --sim-robot`); the launch file does with `use_sim:=true`
(`sim_robot:=`)."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oxygen_ros import share

TASK_NODES = ("vqa_node", "instruction_node", "navigation_node")
SO100_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")  # LeRobot's
JAW = "gripper"
SO100_ARM = tuple(j for j in SO100_JOINTS if j != JAW)
# rad/s^2 per joint, as a joint_limits.yaml gives MoveIt (the URDF has none, and a VLA goal needs them): an STS3215
# servo's ceiling at its highest acceleration setting (254 x 100 steps/s^2, 4096 steps a turn); the jaw's is not
# played along the trajectory (its own controller moves it)
SO100_ACCELERATION = 39.0
SIDES = ("left", "right")  # a bimanual robot's arms, in the model's order
INFERENCE = {"allow_random_weights": True}
TASK = {"use_sim": True}
NAVIGATION = TASK | {"nav2": "never", "allow_builtin_driver": True}
GRIPPER_EFFORT = {"gripper_max_effort": 10.0}
URDFS = {"so100": "sim_arm.urdf", "bi_so100": "sim_bimanual.urdf"}  # config/, each robot's description
ROBOTS = tuple(URDFS)


@dataclass(frozen=True)
class Controller:
    """One simulated ros2_control controller: its node's name, the executable that runs it (arm_sim or
    gripper_sim) and the parameters it gets over its executable's section of the config."""

    name: str
    executable: str
    parameters: dict[str, Any]


def _so100() -> tuple[tuple[Controller, ...], dict[str, Any]]:
    arm = {"joint_names": list(SO100_ARM), "initial_positions": [0.0] * len(SO100_ARM),
           "urdf_path": str(urdf("so100"))}  # fmt: skip
    mapping = {"action_joint_names": list(SO100_JOINTS), "state_joint_names": list(SO100_JOINTS),
               "gripper_joint_names": [JAW], "joint_acceleration_limits": [SO100_ACCELERATION] * len(SO100_JOINTS)}
    return (Controller("arm_sim", "arm_sim", arm), Controller("gripper_sim", "gripper_sim", {})), mapping


def _bi_so100() -> tuple[tuple[Controller, ...], dict[str, Any]]:
    controllers: list[Controller] = []
    for side in SIDES:
        arm = {"joint_names": [f"{side}_{j}" for j in SO100_ARM], "initial_positions": [0.0] * len(SO100_ARM),
               "action_name": f"{side}_arm_controller/follow_joint_trajectory",
               "trajectory_topic": f"{side}_arm_controller/joint_trajectory",
               "urdf_path": str(urdf("bi_so100")),
               # one robot_description (robot_state_publisher's); the right arm's copy stays on its own node
               "description_topic": "robot_description" if side == SIDES[0] else "~/robot_description"}  # fmt: skip
        jaw = {"joint_name": f"{side}_{JAW}", "action_name": f"{side}_gripper_controller/gripper_cmd"}
        controllers += [Controller(f"{side}_arm_sim", "arm_sim", arm), Controller(f"{side}_gripper_sim", "gripper_sim",
                                                                                  jaw)]  # fmt: skip
    joints = [f"{side}_{j}" for side in SIDES for j in SO100_JOINTS]
    mapping = {"action_joint_names": joints, "state_joint_names": joints,
               "gripper_joint_names": [f"{side}_{JAW}" for side in SIDES],
               "joint_acceleration_limits": [SO100_ACCELERATION] * len(joints),
               "trajectory_actions": [c.parameters["action_name"] for c in controllers if c.executable == "arm_sim"],
               "trajectory_joint_counts": [len(SO100_ARM)] * len(SIDES),
               "gripper_actions": [c.parameters["action_name"] for c in controllers if c.executable == "gripper_sim"]}
    return tuple(controllers), mapping  # fmt: skip


def _known(robot: str) -> str:
    if robot not in ROBOTS:
        raise ValueError(f"simulated robot {robot!r} is not one of {', '.join(ROBOTS)}")
    return robot


def _robot(robot: str) -> tuple[tuple[Controller, ...], dict[str, Any]]:
    """The robot's controllers and the instruction node's joint mapping; ValueError naming the robot."""
    return _so100() if _known(robot) == "so100" else _bi_so100()


def urdf(robot: str = ROBOTS[0]) -> Path:
    """The installed URDF of the simulated ``robot`` (its arm_sims publish it, robot_state_publisher reads it);
    ValueError naming an unknown robot."""
    return share.config_file(URDFS[_known(robot)])


def controllers(robot: str = ROBOTS[0]) -> tuple[Controller, ...]:
    """The simulated robot's controllers, one node each; ValueError naming an unknown robot."""
    return _robot(robot)[0]


def parameters(robot: str = ROBOTS[0], config: dict | None = None) -> dict[str, dict[str, Any]]:
    """Per node name, the parameters a simulated bringup of ``robot`` adds. ROS gives a node the config's section of
    its own name only, so a controller named for its side (left_arm_sim) first gets ``config``'s (the parsed
    parameter file's) section of its executable (arm_sim), as the one-arm robot's controller reads it."""
    arms, mapping = _robot(robot)
    tasks = {name: dict(TASK) for name in TASK_NODES} | {"navigation_node": dict(NAVIGATION),
                                                         "instruction_node": TASK | GRIPPER_EFFORT | mapping}
    sections = {c.name: _section(config, c.executable) if c.name != c.executable else {} for c in arms}
    return {"oxygen_inference": dict(INFERENCE)} | tasks | {c.name: sections[c.name] | c.parameters for c in arms}


def _section(config: dict | None, name: str) -> dict[str, Any]:
    return dict(((config or {}).get(name) or {}).get("ros__parameters") or {})
