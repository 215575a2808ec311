"""nav2's NavigateToPose result, as each distribution shapes it, becomes our ending without raising: Humble's has no
error code (``std_msgs/Empty result``), Jazzy's an ``error_code`` without ``error_msg``, Kilted's both
(the compat definition this package builds)."""

from types import SimpleNamespace

from action_msgs.msg import GoalInfo, GoalStatus
from action_msgs.srv import CancelGoal
from nav2_msgs.action import NavigateToPose

from oxygen_ros.errors import ErrorCode
from oxygen_ros.nodes.nav2_handoff import cancel_confirmed, outcome

ABORTED = GoalStatus.STATUS_ABORTED
HUMBLE = SimpleNamespace(result=None)
JAZZY = SimpleNamespace(NONE=0, UNKNOWN=9000, FAILED_TO_LOAD_BEHAVIOR_TREE=9001, TF_ERROR=9002, error_code=9002)


def test_kilted_results_keep_their_code_and_text():
    result = NavigateToPose.Result(error_code=NavigateToPose.Result.TIMEOUT, error_msg="took too long")
    code, message = outcome(ABORTED, result)
    assert code == ErrorCode.DEADLINE_EXCEEDED and message.endswith("(error_code 9003): took too long")


def test_jazzy_results_map_their_code_without_a_text():
    assert outcome(ABORTED, JAZZY) == (ErrorCode.TF_ERROR, "nav2 gave up (error_code 9002)")
    assert outcome(ABORTED, SimpleNamespace(**{**vars(JAZZY), "error_code": 9000}))[0] == ErrorCode.ABORTED


def test_humble_results_without_a_code_are_aborted_and_success_is_success_everywhere():
    assert outcome(ABORTED, HUMBLE) == (ErrorCode.ABORTED, "nav2 gave up (its result carries no error code)")
    for result in (HUMBLE, JAZZY, NavigateToPose.Result()):
        assert outcome(GoalStatus.STATUS_SUCCEEDED, result)[0] is None
        assert outcome(GoalStatus.STATUS_CANCELED, result)[0] == ErrorCode.CANCELLED


def test_a_cancel_is_confirmed_only_when_nav2_stops_driving_the_goal():
    """rclcpp_action (nav2's bt_navigator) refuses with ERROR_REJECTED; an rclpy server with ERROR_NONE and no goal
    listed as cancelling. A goal unknown to the server or already over is not driven either."""
    response = CancelGoal.Response
    assert cancel_confirmed(response(return_code=response.ERROR_NONE, goals_canceling=[GoalInfo()]))
    assert not cancel_confirmed(response(return_code=response.ERROR_NONE, goals_canceling=[]))
    assert not cancel_confirmed(response(return_code=response.ERROR_REJECTED))
    assert cancel_confirmed(response(return_code=response.ERROR_UNKNOWN_GOAL_ID))
    assert cancel_confirmed(response(return_code=response.ERROR_GOAL_TERMINATED))
