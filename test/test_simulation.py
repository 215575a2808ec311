"""oxygen_ros/simulation.py's robots against the installed URDFs and config: the bimanual bi-SO-100 is two of
config/sim_arm.urdf's SO-100s joint for joint, every action joint it maps is one of its URDF's, and a controller
named for its side reads its executable's config section under its own values."""

import pytest
import yaml

from oxygen_ros import share, simulation
from oxygen_ros.control.arm.joint_limits import urdf_limits

BIMANUAL = simulation.parameters("bi_so100")


def test_the_bimanual_urdf_is_two_so100s_with_the_so100s_limits():
    one = urdf_limits(share.config_file("sim_arm.urdf").read_text())
    two = urdf_limits(share.config_file("sim_bimanual.urdf").read_text())
    assert two == {f"{side}_{joint}": limit for side in simulation.SIDES for joint, limit in one.items()}
    assert set(two) == set(BIMANUAL["instruction_node"]["action_joint_names"])


def test_each_joint_goes_to_the_controller_that_has_it_in_the_models_order():
    instruction = BIMANUAL["instruction_node"]
    served = {BIMANUAL[c.name]["action_name"]: BIMANUAL[c.name] for c in simulation.controllers("bi_so100")}
    jaws = instruction["gripper_joint_names"]
    assert [served[action]["joint_name"] for action in instruction["gripper_actions"]] == jaws
    arms = [served[action] for action in instruction["trajectory_actions"]]
    assert [j for arm in arms for j in arm["joint_names"]] == [j for j in instruction["action_joint_names"]
                                                               if j not in jaws]  # fmt: skip
    assert instruction["trajectory_joint_counts"] == [len(arm["joint_names"]) for arm in arms]
    assert [arm["urdf_path"] for arm in arms] == [str(share.config_file("sim_bimanual.urdf"))] * 2
    assert [arm["description_topic"] for arm in arms] == ["robot_description", "~/robot_description"]


def test_a_side_controller_reads_its_executables_config_section_under_its_own_values():
    config = yaml.safe_load(share.default_config().read_text())
    config["gripper_sim"]["ros__parameters"]["velocity"] = 1.5
    values = simulation.parameters("bi_so100", config)
    assert values["left_gripper_sim"]["velocity"] == values["right_gripper_sim"]["velocity"] == 1.5
    assert values["left_gripper_sim"]["action_name"] == "left_gripper_controller/gripper_cmd"  # its own over the file's
    assert config["gripper_sim"]["ros__parameters"]["action_name"] == "gripper_controller/gripper_cmd"
    assert simulation.parameters("so100", config)["gripper_sim"] == {}  # ROS gives it its section by name


def test_an_unknown_robot_is_named():
    with pytest.raises(ValueError, match="'aloha' is not one of so100, bi_so100"):
        simulation.parameters("aloha")
