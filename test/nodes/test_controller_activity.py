"""The refusal a controller its manager lists as not active gets: the ros2controlcli command that brings it back from
each lifecycle state (ros2_control's controller manager configures an unconfigured controller when it is set
inactive, activates an inactive one, and refuses a finalized one both, and from Jazzy on its unloading), addressed to
its manager where that is not ros2controlcli's default."""

from oxygen_ros.nodes.controller_activity import GRIPPER_INACTIVE, JTC_INACTIVE, inactive_reason


def test_an_inactive_controller_is_told_how_to_activate_it_on_its_own_manager():
    assert inactive_reason("/arm_controller", "inactive", "/controller_manager") == (
        "/arm_controller is inactive, not active (/controller_manager lists it so): " + JTC_INACTIVE +
        "; activate it (`ros2 control set_controller_state arm_controller active`, or spawn it active)")  # fmt: skip
    said = inactive_reason("/left/gripper_controller", "inactive", "/left/controller_manager", GRIPPER_INACTIVE)
    assert GRIPPER_INACTIVE in said
    assert said.endswith("(`ros2 control set_controller_state -c /left/controller_manager gripper_controller active`, "
                         "or spawn it active)")  # fmt: skip


def test_an_unconfigured_controller_is_configured_first_and_a_finalized_one_needs_its_manager_restarted():
    said = inactive_reason("/arm_controller", "unconfigured", "/controller_manager")
    assert said.endswith("configure, then activate it (`ros2 control set_controller_state arm_controller inactive`, "
                         "then `ros2 control set_controller_state arm_controller active`)")  # fmt: skip
    said = inactive_reason("/arm_controller", "finalized", "/controller_manager")
    assert said.endswith("restart its controller manager (a finalized controller is never configured nor activated "
                         "again)")  # fmt: skip
