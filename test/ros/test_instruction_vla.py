"""`instruction_node` with a VLA (pi05-causal-tiny, random weights) driving a simulated ros2_control arm (`arm_sim`: a
FollowJointTrajectory server that plays each trajectory and publishes the JointState it reaches), closed loop,
through real rclpy nodes: chunks are asked for with the arm's state, executed as trajectories the controller accepts,
inside the configured limits and continuous with the measured state, traced on /arm/chunk_trace; a cancelled goal
leaves the arm holding; trajectories (on a topic, captured) name the joints, start after send_lead_s and end at rest;
targets beyond tight limits are refused and the goal ends OUT_OF_RANGE with the arm unmoved; at a period the model
cannot keep, the chunk the arm stood waiting for plays from its first action and later ones, too late, end the goal
DEADLINE_EXCEEDED after max_missed_chunks; joint states that stop end it FAILED_PRECONDITION; no KV block
is left held; with allow_random_weights false the goal is refused."""

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from inference_client import Capture
from manager_stand_in import ControllerManager
from oxygen_ros.action import FollowInstruction
from oxygen_ros.msg import ChunkTrace
from rclpy.parameter import Parameter
from ros_harness import send_goal, wait_until
from sensor_msgs.msg import JointState
from task_graph import task_graph

from oxygen_ros.nodes.infer_client import inference_at
from oxygen_ros.nodes.instruction_node import InstructionNode
from trajectory_msgs.msg import JointTrajectory

PERIOD_S = 0.3  # a 10-action chunk covers 3 s: a loaded CPU's ~0.5-1 s chunk arrives with most of its steps ahead
PI05_TINY = {"model": "pi05-causal-tiny", "kv_cache_bytes": 256 << 20, "max_model_len": 2048, "observation_ring": 64,
             "allow_random_weights": True, "action_period_s": PERIOD_S}  # fmt: skip
ACTION_DIM = 32  # the random model's action width: a 32-joint simulated arm
JOINTS = [f"arm_joint_{i}" for i in range(ACTION_DIM)]
LIMIT, SPEED = 50.0, 1000.0  # random weights act noisily: wide limits, checked below all the same
ARM = {"action_joint_names": JOINTS, "joint_lower_limits": [-LIMIT] * ACTION_DIM,
       "joint_upper_limits": [LIMIT] * ACTION_DIM, "joint_velocity_limits": [SPEED] * ACTION_DIM,
       "joint_acceleration_limits": [math.inf] * ACTION_DIM,  # waived (.inf): random weights jolt
       "max_start_jump": 10.0, "max_tracking_error": 10.0, "input_timeout_s": 1.0, "max_missed_chunks": 3}  # fmt: skip


@contextmanager
def second_robot(graph, namespace: str, arm_sim: dict | None = None, **parameters) -> Iterator[Capture]:
    """Another arm (arm_sim's parameters ``arm_sim``) and instruction node under ``namespace``, sharing the root's
    inference node; yields that arm's joint states once the first arrived, and removes both after."""
    arm = graph.add_arm(JOINTS, namespace, **(arm_sim or {}))
    node = InstructionNode(context=graph.context, namespace=namespace, cli_args=inference_at("/"),
                           parameter_overrides=[Parameter(k, value=v) for k, v in (ARM | parameters).items()])  # fmt: skip
    graph.executor.add_node(node)
    states = Capture(graph.client, JointState, f"{namespace}/joint_states", 1000)
    try:
        wait_until(lambda: states.messages, 10.0, f"{namespace}'s joint state")
        yield states
    finally:
        for n in (node, arm):
            graph.executor.remove_node(n)
            n.destroy_node()
    graph.idle_pool()


@pytest.fixture(scope="module")
def graph(ros_domain_id):
    with task_graph(ros_domain_id, InstructionNode, PI05_TINY, narration_period_s=30.0, max_new_tokens=2,
                    **ARM) as (g, _):  # fmt: skip
        g.arm = g.add_arm(JOINTS)
        g.states = Capture(g.client, JointState, "/joint_states", 1000)
        g.traces = Capture(g.client, ChunkTrace, "/arm/chunk_trace", 100)
        g.start_inference()
        g.wait_for_frame()
        yield g


def follow(graph, duration_s: float, rate_hz: float = 5.0, namespace: str = ""):
    goal = FollowInstruction.Goal(instruction="pick up the red triangle", rate_hz=rate_hz, duration_s=duration_s)
    return send_goal(graph.client, FollowInstruction, f"{namespace}/follow_instruction", goal)


def _positions(msgs: list[JointState]) -> tuple[np.ndarray, np.ndarray]:
    """(times s, positions [n, J]) of the arm's published states, in JOINTS order."""
    times = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in msgs])
    order = [list(msgs[0].name).index(j) for j in JOINTS]
    return times, np.array([np.asarray(m.position)[order] for m in msgs])


def _standing(graph) -> np.ndarray:
    """The arm's positions once a state says it is at rest (its stop brakes over 0.1 s or more, and the state of the
    moment it stood may come after the goal's result on a busy machine), stopped by a one-point trajectory (ArmIO's
    braking stop, or a cancel's hold), not at the end of a chunk that played on."""
    def resting() -> bool:
        last, before = graph.states.messages[-1], graph.states.messages[-2]
        return not np.any(last.velocity) and not np.any(before.velocity) and last.position == before.position

    wait_until(resting, 5.0, "the arm at rest")
    assert len(graph.arm._trajectory.times_s) == 1, "the arm ran out its chunk instead of being stopped"
    return np.asarray(graph.states.messages[-1].position)


def test_chunks_drive_the_arm_through_its_controller(graph, capfd):
    wait_until(lambda: graph.states.messages, 10.0, "the arm's first joint state")
    before_states, before_traces = len(graph.states.messages), len(graph.traces.messages)
    handle = follow(graph, duration_s=6.0)
    out = handle.result(timeout=90.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    assert "joint_acceleration_limits .inf: chunks are not checked" in capfd.readouterr().err  # waived: named
    result = out.result
    assert 2 <= result.chunks_sent <= result.chunks_asked and result.chunks_missed <= result.chunks_asked, result
    assert 0 < result.latency_p50_ms <= result.latency_p99_ms < 2 * 10 * PERIOD_S * 1000, result
    wait_until(lambda: len(graph.traces.messages) - before_traces >= result.chunks_sent, 5.0, "every trace")
    traces = graph.traces.messages[before_traces:]
    assert [t.chunk_id for t in traces] == list(range(result.chunks_sent))
    assert len({t.task_id for t in traces}) == 1 and all(t.blended + t.appended > 0 for t in traces)
    assert traces[0].dropped == 0, traces[0]  # the arm stood still while the first was computed: it starts from row 0
    assert all(t.request_id.startswith("req-") for t in traces) and len({t.request_id for t in traces}) == len(traces)
    for t in traces:  # each names the camera frame it came from, and its latency counts from the older input
        assert t.observation_id.startswith("obs-") and t.frame_stamp.sec > 0, t
        frame_s, observed_s = (x.sec + x.nanosec * 1e-9 for x in (t.frame_stamp, t.observed_at))
        sent_s = t.header.stamp.sec + t.header.stamp.nanosec * 1e-9
        assert t.latency_ms == pytest.approx((sent_s - min(frame_s, observed_s)) * 1e3, abs=1.0)
    assert all(t.taken_spread_ms == 0.0 for t in traces)  # one controller: nothing to be out of step with
    assert traces[-1].underruns <= result.underruns  # the result also counts one after the last chunk
    # closed loop: the arm moved, stayed inside the limits, and never jumped faster than its velocity limit
    times, q = _positions(graph.states.messages[before_states:])
    assert np.abs(q - q[0]).max() > 1e-3, "the arm moved"
    assert np.abs(q).max() <= LIMIT
    steps = np.abs(np.diff(q, axis=0)) / np.maximum(np.diff(times), 1e-3)[:, None]
    assert steps.max() <= SPEED * 1.01
    # the goal ended: the arm brakes to rest (a stop replaced its trajectory) instead of running out its plan
    held = _standing(graph)
    time.sleep(0.5)
    np.testing.assert_allclose(graph.states.messages[-1].position, held, atol=1e-9)
    graph.idle_pool()


def test_a_controller_that_listens_but_never_plays_is_no_success(graph):
    """On ``trajectory_topic`` a controller switched off still listens (a topic has no answer): every chunk goes
    out, the arm never moves, and the goal must not succeed; the plan's motion stayed inside max_tracking_error, so
    the end of the goal finds it (``VlaArm.unmoved``)."""
    listening = Capture(graph.client, JointTrajectory, "/dead/switched_off/joint_trajectory", 100)
    # the random model's plan, scaled by 0.1, takes its farthest joint ~0.45 in 4 s (0.3-0.45 seen): inside a 1.5
    # tracking error and over its tenth
    with second_robot(graph, "/dead", trajectory_topic="switched_off/joint_trajectory", max_tracking_error=1.5,
                      action_scale=[0.1] * ACTION_DIM) as states:  # fmt: skip
        out = follow(graph, duration_s=4.0, namespace="/dead").result(timeout=90.0)
        assert out.status == GoalStatus.STATUS_ABORTED and out.result.chunks_sent >= 1, out.result.message
        assert "the arm did not move as planned" in out.result.message and listening.messages
        _, q = _positions(states.messages)
        assert np.abs(q - q[0]).max() == 0.0


def test_a_controller_that_starts_elsewhere_than_controller_starts_from_says_is_refused(graph):
    """This arm's controller reads no velocity (its state_interfaces [position]: it starts each trajectory from rest)
    while controller_starts_from keeps its default, measured: read from the controller's own parameters before the
    first chunk, the goal is refused FAILED_PRECONDITION naming the setting to use, the arm never moved."""
    with second_robot(graph, "/at_rest", arm_sim={"state_interfaces": ["position"]}) as states:
        out = follow(graph, duration_s=4.0, namespace="/at_rest").result(timeout=90.0)
    assert (out.status, out.result.error_code, out.result.chunks_sent) == \
        (GoalStatus.STATUS_ABORTED, "FAILED_PRECONDITION", 0), out.result.message  # fmt: skip
    assert out.result.message.startswith(
        "/at_rest/arm_sim starts each trajectory from the measured position at rest (its state_interfaces "
        "['position'] lack velocity), but controller_starts_from is measured: set controller_starts_from: "
        "measured_at_rest"), out.result.message  # fmt: skip
    assert np.abs([m.position for m in states.messages]).max() == 0.0


def test_a_controller_its_manager_lists_inactive_is_refused(graph):
    """A joint_trajectory_controller loaded but not active keeps its topic's subscriber and drops every trajectory on
    it unread: its controller manager lists it inactive, so the goal is refused FAILED_PRECONDITION before any chunk
    goes out, naming the command that activates it, the arm unmoved. Listed active, the same arm plays the goal."""
    manager = ControllerManager(graph.context, "/off", {"joint_state_broadcaster": "active", "arm_sim": "inactive"})
    graph.executor.add_node(manager)
    try:
        with second_robot(graph, "/off", trajectory_topic="arm_controller/joint_trajectory") as states:
            out = follow(graph, duration_s=2.0, namespace="/off").result(timeout=90.0)
            assert (out.status, out.result.error_code, out.result.chunks_sent) == \
                (GoalStatus.STATUS_ABORTED, "FAILED_PRECONDITION", 0), out.result.message  # fmt: skip
            assert out.result.message.startswith("/off/arm_sim is inactive, not active (/off/controller_manager lists "
                                                 "it so)"), out.result.message  # fmt: skip
            assert "`ros2 control set_controller_state -c /off/controller_manager arm_sim active`" in \
                out.result.message  # fmt: skip
            assert np.abs([m.position for m in states.messages]).max() == 0.0
            manager.states["arm_sim"] = "active"
            out = follow(graph, duration_s=2.0, namespace="/off").result(timeout=90.0)
            assert out.status == GoalStatus.STATUS_SUCCEEDED and out.result.chunks_sent >= 1, out.result.message
    finally:
        graph.executor.remove_node(manager)
        manager.destroy_node()


def test_a_cancelled_goal_leaves_the_arm_holding(graph):
    handle = follow(graph, duration_s=0.0)  # until cancelled
    wait_until(lambda: len(handle.feedback) >= 2, 60.0, "two chunks on the arm")
    handle.cancel()
    assert handle.result(timeout=30.0).status == GoalStatus.STATUS_CANCELED
    held = _standing(graph)
    time.sleep(1.0)  # the plan had up to 2 s left: it must not play on
    np.testing.assert_allclose(graph.states.messages[-1].position, held, atol=1e-9)
    graph.idle_pool()


def test_trajectories_name_the_joints_start_ahead_and_end_at_rest(graph):
    """The same stream on the controller's topic interface (arm_sim plays it, as JTC's ~/joint_trajectory), captured:
    what a joint_trajectory_controller reads."""
    sent = Capture(graph.client, JointTrajectory, "/topic/arm_controller/joint_trajectory", 100)
    with second_robot(graph, "/topic", trajectory_topic="arm_controller/joint_trajectory", send_lead_s=0.1):
        out = follow(graph, duration_s=4.0, namespace="/topic").result(timeout=90.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    assert len(sent.messages) >= out.result.chunks_sent >= 2
    for trajectory in sent.messages[: out.result.chunks_sent]:
        assert list(trajectory.joint_names) == JOINTS
        first = trajectory.points[0].time_from_start
        assert first.sec + first.nanosec * 1e-9 >= 0.1 - 1e-6  # send_lead_s ahead of its stamp (the send time)
        tfs = [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in trajectory.points]
        assert all(b > a for a, b in zip(tfs, tfs[1:]))
        assert np.abs([p.positions for p in trajectory.points]).max() <= LIMIT
        assert not any(trajectory.points[-1].velocities)


@pytest.mark.parametrize(("tight", "phrase"), [
    ({"joint_lower_limits": [-1e-3] * ACTION_DIM, "joint_upper_limits": [1e-3] * ACTION_DIM, "limit_margin": 0.0},
     "beyond its limits"),
    ({"joint_acceleration_limits": [1e-3] * ACTION_DIM}, "over its acceleration limit"),  # joint_limits.yaml's kind
])  # fmt: skip
def test_targets_beyond_tight_limits_are_refused_and_the_arm_stays(graph, tight, phrase):
    with second_robot(graph, "/tight", **tight) as states:
        out = follow(graph, duration_s=30.0, namespace="/tight").result(timeout=90.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "OUT_OF_RANGE", out.result.message
    assert phrase in out.result.message and "max_missed_chunks" in out.result.message
    assert (out.result.chunks_sent, out.result.chunks_missed) == (0, 3)
    assert np.abs([m.position for m in states.messages]).max() == 0.0  # never moved


def test_an_arm_joint_without_an_acceleration_limit_is_refused_before_anything_moves(graph):
    """As MoveIt 2 refuses to plan without them: a trajectory joint whose joint_acceleration_limits entry is NaN (or
    the list empty: a URDF has none) refuses the goal FAILED_PRECONDITION naming that joint and the remedy, nothing
    sent, the arm still; ARM's .inf entries waive the check on purpose and pass."""
    unset = [math.inf] * (ACTION_DIM - 1) + [math.nan]
    with second_robot(graph, "/unlimited", joint_acceleration_limits=unset) as states:
        out = follow(graph, duration_s=30.0, namespace="/unlimited").result(timeout=90.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert out.result.error_code == "FAILED_PRECONDITION", out.result.message
    assert f"joints ['{JOINTS[-1]}'] have no acceleration limit" in out.result.message, out.result.message
    assert "joint_acceleration_limits" in out.result.message and out.result.chunks_sent == 0
    assert np.abs([m.position for m in states.messages]).max() == 0.0  # never moved


def test_stale_joint_states_stop_the_goal(graph):
    handle = follow(graph, duration_s=30.0)
    wait_until(lambda: handle.feedback, 60.0, "the first chunk")
    graph.executor.remove_node(graph.arm)  # the arm's driver dies: joint_states stop
    graph.arm.destroy_node()
    try:
        out = handle.result(timeout=30.0)
        assert out.status == GoalStatus.STATUS_ABORTED
        assert out.result.error_code == "FAILED_PRECONDITION", out.result.message
        assert "old, over input_timeout_s" in out.result.message or "not available" in out.result.message
    finally:
        graph.arm = graph.add_arm(JOINTS)
    graph.idle_pool()


def test_a_camera_that_stops_ends_the_goal_with_the_arm_holding(graph):
    """The camera goes quiet mid-goal: the next chunk is asked for about a frame older than input_timeout_s, and the
    goal ends FAILED_PRECONDITION naming the frame, the arm held; a new goal is refused the same way at once."""
    seen = len(graph.states.messages)
    wait_until(lambda: len(graph.states.messages) > seen + 2, 10.0, "the arm's joint states now")
    before = len(graph.traces.messages)
    handle = follow(graph, duration_s=0.0)  # until cancelled
    result = handle.handle.get_result_async()  # done early only on a failure: say which
    wait_until(lambda: len(graph.traces.messages) - before >= 1 or result.done(), 30.0, "a first chunk on the arm")
    assert not result.done(), result.result().result
    graph.executor.remove_node(graph.camera)
    try:
        out = handle.result(timeout=60.0)
        assert out.status == GoalStatus.STATUS_ABORTED
        assert out.result.error_code == "FAILED_PRECONDITION", out.result.message
        assert "camera frame obs-" in out.result.message and "over input_timeout_s" in out.result.message
        held = _standing(graph)
        time.sleep(0.5)
        np.testing.assert_allclose(graph.states.messages[-1].position, held, atol=1e-9)
        again = follow(graph, duration_s=2.0).result(timeout=60.0)
        assert (again.result.error_code, again.result.chunks_sent) == ("FAILED_PRECONDITION", 0), again.result
        assert "over input_timeout_s" in again.result.message
    finally:
        graph.executor.add_node(graph.camera)
        graph.wait_for_frame()
    graph.idle_pool()


def test_a_period_the_model_cannot_keep_plays_the_chunk_the_arm_waited_for_then_ends_the_goal(graph):
    """A control period the model cannot keep (2 ms; the random model's actions scaled by 0.01, so its steps stay
    within the velocity limit at that rate): the goal's first chunk, asked for without a deadline while the arm stood
    still, is played from its first action, put off to when the controller can take it (with its leading steps dropped
    as if the arm had played them, it would start 50 or more steps of motion away, past the chunk's end); every later
    one misses its deadline (a few periods): the goal ends DEADLINE_EXCEEDED after max_missed_chunks."""
    graph.stop_inference()
    graph.inference_parameters = PI05_TINY | {"action_period_s": 0.002}
    graph.start_inference()
    graph.wait_for_frame()
    try:
        # (inputs up to 5 s old when a chunk comes: a loaded CPU's first chunk after the restart may take seconds)
        with second_robot(graph, "/slow_model", action_scale=[0.01] * ACTION_DIM, input_timeout_s=5.0) as states:
            before = len(states.messages)
            traces = Capture(graph.client, ChunkTrace, "/slow_model/arm/chunk_trace", 10)
            wait_until(lambda: graph.client.count_publishers("/slow_model/arm/chunk_trace"), 5.0, "the trace topic")
            out = follow(graph, duration_s=30.0, namespace="/slow_model").result(timeout=90.0)
            assert out.status == GoalStatus.STATUS_ABORTED
            assert out.result.error_code == "DEADLINE_EXCEEDED", out.result.message
            assert "max_missed_chunks" in out.result.message and "deadline" in out.result.message
            assert out.result.chunks_sent == 1 and out.result.chunks_missed >= 3, out.result
            wait_until(lambda: traces.messages, 5.0, "the first chunk's trace")
            first = traces.messages[0]
            assert (first.dropped, first.blended, first.appended) == (0, 0, 10) and first.waited >= 50, first
            _, q = _positions(states.messages[before:])
            assert np.abs(q - q[0]).max() > 0.0, "the arm played the chunk"
    finally:
        graph.stop_inference()
        graph.inference_parameters = PI05_TINY
        graph.start_inference()
        graph.wait_for_frame()
    graph.idle_pool()


def test_a_random_weight_model_sends_no_actions_unless_allowed(graph):
    graph.stop_inference()
    graph.inference_parameters = PI05_TINY | {"allow_random_weights": False}
    graph.start_inference()
    before = len(graph.traces.messages)
    goal = FollowInstruction.Goal(instruction="pick up the red triangle", rate_hz=1.0, duration_s=2.0)
    out = send_goal(graph.client, FollowInstruction, "/follow_instruction", goal).result(timeout=60.0)
    assert out.status == GoalStatus.STATUS_ABORTED
    assert (out.result.error_code, out.result.chunks_sent) == ("FAILED_PRECONDITION", 0)
    assert "random weights" in out.result.message and "allow_random_weights" in out.result.message
    assert len(graph.traces.messages) == before
