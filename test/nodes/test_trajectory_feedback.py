"""arm_sim's FollowJointTrajectory feedback fits the control_msgs it is built against: Kilted's (this venv's, and the
compat definition this package builds) carries the point being played (``index``); Humble's and Jazzy's have no such
field, and a message refuses a field it does not have, so arm_sim must not name it there."""

from control_msgs.action import FollowJointTrajectory
from trajectory_msgs.msg import JointTrajectoryPoint

from oxygen_ros.nodes.arm_sim import trajectory_feedback

JAZZY_FIELDS = ("header", "joint_names", "desired", "actual", "error", "multi_dof_joint_names", "multi_dof_desired",
                "multi_dof_actual", "multi_dof_error")  # control_msgs 4.x (Jazzy), 2.x/3.x (Humble)  # fmt: skip


class JazzyFeedback:
    """The shape of Jazzy's FollowJointTrajectory_Feedback: a fixed set of fields, a constructor that refuses others
    (as rosidl's generated messages do)."""

    __slots__ = JAZZY_FIELDS

    def __init__(self, **kwargs) -> None:
        assert set(kwargs) <= set(JAZZY_FIELDS), f"Invalid arguments passed to constructor: {set(kwargs) - set(JAZZY_FIELDS)}"
        for name in JAZZY_FIELDS:
            setattr(self, name, kwargs.get(name))

    @classmethod
    def get_fields_and_field_types(cls) -> dict[str, str]:
        return {name: "" for name in JAZZY_FIELDS}


def _points() -> tuple[JointTrajectoryPoint, JointTrajectoryPoint, JointTrajectoryPoint]:
    return JointTrajectoryPoint(positions=[0.1]), JointTrajectoryPoint(positions=[0.1]), JointTrajectoryPoint(positions=[0.0])


def test_kilted_feedback_names_the_point_being_played():
    feedback = trajectory_feedback(FollowJointTrajectory.Feedback, ["j"], *_points(), index=3)
    assert feedback.index == 3 and list(feedback.joint_names) == ["j"]


def test_jazzy_and_humble_feedback_go_without_it():
    feedback = trajectory_feedback(JazzyFeedback, ["j"], *_points(), index=3)
    assert feedback.joint_names == ["j"] and not hasattr(feedback, "index")
