"""The interface contract (issue 2) and a round trip of every service and action through real rclpy nodes."""

import pytest
from action_msgs.msg import GoalStatus
from action_msgs.srv import CancelGoal
from echo_servers import EchoServers
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from ros_harness import call_service, send_goal, spin_nodes

from oxygen_ros.action import AskQuestion as AskQuestionAction
from oxygen_ros.action import FollowInstruction, Navigate
from oxygen_ros.msg import ActionChunk, KvPoolStats, Observation, TaskKvUsage, TierStats
from oxygen_ros.srv import AskQuestion, GetPoolStats, Infer

# Field names and types that the CLI, tests and users rely on; more fields may be added, these must stay.
CONTRACT = {
    Observation: "header:std_msgs/Header observation_id:string images:sequence<sensor_msgs/Image> text:string "
    "state:sequence<float>",
    ActionChunk: "header:std_msgs/Header task_id:string horizon:uint32 action_dim:uint32 period_s:float "
    "actions:sequence<float>",
    TaskKvUsage: "task_id:string task_type:string kv_dtype:string blocks:uint32 shared_blocks:uint32 bytes:uint64",
    TierStats: "name:string capacity_bytes:uint64 used_bytes:uint64 blocks:uint32 hits:uint64 misses:uint64",
    KvPoolStats: "header:std_msgs/Header model:string block_size:uint32 total_blocks:uint32 free_blocks:uint32 "
    "cached_blocks:uint32 shared_blocks:uint32 prefix_hit_rate:float fragmentation:float evictions:uint64 "
    "active_requests:uint32 queued_requests:uint32 tasks:sequence<oxygen_ros/TaskKvUsage> "
    "tiers:sequence<oxygen_ros/TierStats>",
    Infer.Request: "task_id:string task_type:string prompt:string observation_id:string want_text:boolean "
    "want_actions:boolean max_new_tokens:uint32 priority:uint8 deadline_s:float",
    Infer.Response: "success:boolean error_code:string message:string text:string actions:oxygen_ros/ActionChunk "
    "prompt_tokens:uint32 reused_prefix_tokens:uint32 generated_tokens:uint32 queue_ms:float latency_ms:float",
    AskQuestion.Request: "question:string observation_id:string max_new_tokens:uint32",
    AskQuestion.Response: "success:boolean error_code:string message:string answer:string observation_id:string "
    "reused_prefix_tokens:uint32 latency_ms:float",
    AskQuestionAction.Goal: "question:string observation_id:string max_new_tokens:uint32",
    AskQuestionAction.Result: "success:boolean error_code:string message:string answer:string observation_id:string "
    "reused_prefix_tokens:uint32 reused_image_tokens:uint32 latency_ms:float",
    AskQuestionAction.Feedback: "text:string generated_tokens:uint32",
    GetPoolStats.Request: "",
    GetPoolStats.Response: "stats:oxygen_ros/KvPoolStats",
    FollowInstruction.Goal: "instruction:string rate_hz:float duration_s:float",
    FollowInstruction.Result: "success:boolean error_code:string message:string chunks_sent:uint32 "
    "achieved_rate_hz:float",
    FollowInstruction.Feedback: "chunk:oxygen_ros/ActionChunk narration:string",
    Navigate.Goal: "target:geometry_msgs/PoseStamped instruction:string",
    Navigate.Result: "success:boolean error_code:string message:string distance_remaining:float",
    Navigate.Feedback: "cmd:geometry_msgs/Twist reasoning:string distance_remaining:float "
    "current_pose:geometry_msgs/PoseStamped navigation_time:builtin_interfaces/Duration "
    "estimated_time_remaining:builtin_interfaces/Duration",
}


@pytest.mark.parametrize("msg_type", CONTRACT, ids=lambda t: t.__qualname__)
def test_contract_fields(msg_type):
    expected = dict(field.split(":", 1) for field in CONTRACT[msg_type].split())
    actual = msg_type.get_fields_and_field_types()
    assert {name: actual.get(name) for name in expected} == expected


@pytest.fixture
def client(ros_context):
    """A client node spinning with the echo servers in one MultiThreadedExecutor."""
    node = Node("interface_test_client", context=ros_context)
    with spin_nodes(ros_context, EchoServers(ros_context), node):
        yield node


def test_infer_round_trip(client):
    request = Infer.Request(
        task_id="t1", task_type="vqa", prompt="what is on the table", observation_id="obs-7",
        want_text=True, want_actions=True, max_new_tokens=12, priority=3, deadline_s=0.5,
    )  # fmt: skip
    response = call_service(client, Infer, "/oxygen/infer", request)
    assert response.success and response.error_code == ""
    assert response.text == "echo: what is on the table"
    assert response.message == "task_type=vqa observation_id=obs-7 priority=3 deadline_s=0.5"
    assert (response.prompt_tokens, response.generated_tokens) == (5, 12)
    chunk = response.actions
    assert (chunk.task_id, chunk.horizon, chunk.action_dim) == ("t1", 2, 3)
    assert list(chunk.actions) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_infer_error_answer(client):
    response = call_service(client, Infer, "/oxygen/infer", Infer.Request(task_type="vqa"))
    assert not response.success
    assert (response.error_code, response.message) == ("INVALID_ARGUMENT", "empty prompt")


def test_ask_question_round_trip(client):
    request = AskQuestion.Request(question="how many cups?", observation_id="obs-3", max_new_tokens=9)
    response = call_service(client, AskQuestion, "/vqa/ask", request)
    assert response.success
    assert response.answer == "about obs-3: how many cups?"
    assert response.reused_prefix_tokens == 9


def test_get_pool_stats_round_trip(client):
    stats = call_service(client, GetPoolStats, "/oxygen/get_pool_stats", GetPoolStats.Request()).stats
    assert (stats.model, stats.block_size, stats.total_blocks, stats.evictions) == ("echo", 16, 64, 7)
    assert stats.prefix_hit_rate == pytest.approx(0.5)
    assert [(t.task_id, t.kv_dtype, t.shared_blocks) for t in stats.tasks] == [
        ("vqa-1", "int8", 3),
        ("nav-1", "bfloat16", 3),
    ]
    assert [(t.name, t.capacity_bytes, t.hits) for t in stats.tiers] == [("gpu", 1 << 30, 10), ("cpu", 1 << 32, 0)]
    assert stats.header.stamp.sec > 0


def test_follow_instruction_streams_feedback(client):
    goal = FollowInstruction.Goal(instruction="wave", rate_hz=20.0, duration_s=0.3)
    run = send_goal(client, FollowInstruction, "/follow_instruction", goal)
    response = run.result()
    assert response.status == GoalStatus.STATUS_SUCCEEDED
    assert response.result.success
    assert response.result.chunks_sent >= 3
    assert response.result.achieved_rate_hz > 0
    run.wait_feedback(response.result.chunks_sent)
    assert [f.narration for f in run.feedback] == ["doing: wave"] * response.result.chunks_sent
    assert [f.chunk.actions[0] for f in run.feedback] == [10.0 * i for i in range(len(run.feedback))]


def test_navigate_streams_feedback(client):
    target = PoseStamped()
    target.header.frame_id = "map"
    target.pose.position.x, target.pose.position.y = 0.3, 0.4
    run = send_goal(client, Navigate, "/navigate", Navigate.Goal(target=target, instruction="to the door"))
    response = run.result()
    assert response.status == GoalStatus.STATUS_SUCCEEDED
    assert response.result.success and response.result.distance_remaining == 0.0
    run.wait_feedback(5)
    remaining = [f.distance_remaining for f in run.feedback]
    assert remaining == sorted(remaining, reverse=True) and remaining[-1] == 0.0
    assert run.feedback[0].cmd.linear.x > 0
    assert run.feedback[0].reasoning == "heading to (0.3, 0.4) in map"


def _far_target() -> PoseStamped:
    target = PoseStamped()
    target.pose.position.x = 100.0
    return target


@pytest.mark.parametrize(
    "action_type, name, goal",
    [
        (FollowInstruction, "/follow_instruction", FollowInstruction.Goal(instruction="sweep", rate_hz=20.0)),
        (Navigate, "/navigate", Navigate.Goal(target=_far_target())),
    ],
    ids=["follow_instruction", "navigate"],
)
def test_cancel_mid_stream(client, action_type, name, goal):
    run = send_goal(client, action_type, name, goal)
    run.wait_feedback(2)
    cancel = run.cancel()
    assert cancel.return_code == CancelGoal.Response.ERROR_NONE
    assert [bytes(g.goal_id.uuid) for g in cancel.goals_canceling] == [bytes(run.handle.goal_id.uuid)]
    response = run.result()
    assert response.status == GoalStatus.STATUS_CANCELED
    assert not response.result.success
