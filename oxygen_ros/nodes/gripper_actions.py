"""The two gripper actions ros2_controllers serves: `control_msgs/GripperCommand` (position_controllers /
effort_controllers GripperActionController: Humble, Jazzy (deprecated there), removed in Kilted) and
`control_msgs/ParallelGripperCommand` (parallel_gripper_controllers/GripperActionController: Jazzy on). One place
turns a jaw position (and an effort) into either's goal and reads either's goals, feedback and results, for the
instruction node's client (``gripper_io``) and the simulated jaw (``gripper_sim``).

A ParallelGripperCommand goal is a JointState: its first position is the target; an effort is sent only when one is
set (the controller then bounds the jaw's effort by it, where it has a max-effort interface).
"""

import math

from control_msgs.action import GripperCommand, ParallelGripperCommand
from sensor_msgs.msg import JointState

ACTIONS = {"GripperCommand": GripperCommand, "ParallelGripperCommand": ParallelGripperCommand}
DESCRIPTION = ("the gripper controller's action: GripperCommand (GripperActionController, Humble and Jazzy) or "
               "ParallelGripperCommand (parallel_gripper_controllers, Jazzy on; the only one from Kilted)")  # fmt: skip


def action_type(name: str, parameter: str) -> type:
    """The action ``name`` names; ValueError naming ``parameter`` for any other."""
    if name not in ACTIONS:
        raise ValueError(f"parameter {parameter} must be one of {sorted(ACTIONS)}, got {name!r}")
    return ACTIONS[name]


def goal(action: type, joint: str, position: float, effort: float):
    """``action``'s goal: the jaw ``joint`` to ``position``, its effort bounded by ``effort`` (0 = not sent for a
    ParallelGripperCommand, the controller's own bound)."""
    out = action.Goal()
    if action is GripperCommand:
        out.command.position, out.command.max_effort = float(position), float(effort)
    else:
        out.command = JointState(name=[joint], position=[float(position)], effort=[float(effort)] if effort else [])
    return out


def goal_position(action: type, request) -> float | None:
    """The position a goal asks for; None for a ParallelGripperCommand goal without one (or not a number)."""
    if action is GripperCommand:
        position = request.command.position
    elif len(request.command.position):
        position = request.command.position[0]
    else:
        return None
    return float(position) if math.isfinite(position) else None


def _state(joint: str, position: float) -> JointState:
    return JointState(name=[joint], position=[float(position)], effort=[0.0])


def feedback(action: type, joint: str, position: float):
    if action is GripperCommand:
        return action.Feedback(position=float(position), effort=0.0, stalled=False, reached_goal=False)
    return action.Feedback(state=_state(joint, position))


def result(action: type, joint: str, position: float, reached: bool, stalled: bool = False):
    if action is GripperCommand:
        return action.Result(position=float(position), effort=0.0, stalled=stalled, reached_goal=reached)
    return action.Result(state=_state(joint, position), stalled=stalled, reached_goal=reached)


def result_position(action: type, out) -> float:
    """Where a result says the jaw stopped (NaN when a ParallelGripperCommand result names no position)."""
    if action is GripperCommand:
        return out.position
    return out.state.position[0] if len(out.state.position) else math.nan
