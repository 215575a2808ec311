"""Entries of a robot state by name: a joint is its position, LeRobot's `<motor>.pos` / `<motor>.vel` its position
or velocity; anything else (a joint whose own name has a dot) is a joint."""

from oxygen_ros.control.arm.state_entries import StateEntry, state_entries


def test_joints_and_lerobot_names():
    assert state_entries(["elbow", "shoulder_pan.pos", "shoulder_pan.vel", "arm.link2", ".vel"]) == (
        StateEntry("elbow", "elbow", False),
        StateEntry("shoulder_pan.pos", "shoulder_pan", False),
        StateEntry("shoulder_pan.vel", "shoulder_pan", True),
        StateEntry("arm.link2", "arm.link2", False),
        StateEntry(".vel", ".vel", False),  # a suffix alone names no joint
    )
