"""`bench --suite robot`: a VLA drives an arm at its control rate while VQA questions about the same camera keep
coming, served by one inference node with one pool (``shared``) or by two, one for the arm and one for the
questions (``isolated``), one setting after the other in one run, through real rclpy nodes.

Each setting's graph, each node a process of its own as on the robot (``bringup.EngineProcesses``, the supervisor of
`oxygen-ros up`): its inference node(s) (the isolated arm's in its own namespace), arm_sim (a ros2_control-like arm
with one joint per action dimension of the model: 32 for pi05-random-tiny, wide limits) and instruction_node on the
VLA path (joint states in, one FollowJointTrajectory goal per chunk out, ``actions_per_chunk`` of each chunk
executed, the next asked for when ``chunk_threshold`` remain) running one FollowInstruction goal for ``window_s``;
and in this process camera_sim (the frames) and ``vqa`` client threads asking `/oxygen/infer` about the newest frame,
each a new question as soon as its answer arrives (``vqa_tokens`` each).

pi05-random-tiny is pi0.5 as it runs (the whole prefix bidirectional, the state in the prompt): its chunk requests
share no KV with the questions (docs: "Which KV a VLA shares"), so what is measured is whether the actions keep
their rate next to language work on one engine, not prefix reuse. Every engine computes on ``threads`` threads; on
two CPU cores the two isolated engines' processes share the same cores: the comparison is one scheduler against
two. The engines' output goes to a folder made for the run (``details.node_logs``), and so do instruction_node's
warnings and errors as /rosout carries them (``<setting>_instruction_node.log``: a missed chunk says why; the first
few, and their count, in ``details.<setting>.arm_warnings``).

Metrics, per setting (``_shared``, ``_isolated``): ``action_miss_rate`` (chunks missed over chunks asked for: late,
sent or not, or refused), ``action_latency_p50_ms`` / ``action_latency_p99_ms`` (the goal's result: from the older of
the frame and the state a chunk was computed from to its trajectory reaching the controller), ``underruns`` (times
the arm ran out of planned actions), ``chunks_sent``, ``vqa_answers_per_s``, ``vqa_p99_latency_ms``,
``engine_restarts`` (engine processes that crashed and were started again during the window) and ``node_restarts``
(the same for arm_sim and instruction_node); ``chunk_window_ms`` =
(actions_per_chunk - chunk_threshold) x period, the time a chunk has. Targets (issue 25): miss rate <= 1% shared,
p99 within the chunk window, no underruns.
"""

import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from oxygen_ros.bench.multitask_suite import percentile
from oxygen_ros.bench.engine_windows import engine_window
from oxygen_ros.bench.report import result
from oxygen_ros.bringup import EngineProcesses
from oxygen_ros.models.pi05.config import RANDOM_CONFIGS
from oxygen_ros.nodes.arm_sim import NODE_NAME as ARM_SIM
from oxygen_ros.nodes.infer_client import inference_remappings
from oxygen_ros.nodes.instruction_node import NODE_NAME as INSTRUCTION_NODE
from oxygen_ros.nodes.robot_load import ARM_NAMESPACE, Drive, RobotWorkload, arm_parameters, drive, engine_parameters
from oxygen_ros.supervisor import NodeSpec

MODES = ("shared", "isolated")
SHOWN_WARNINGS = 5  # of instruction_node's warnings in the details (all of them in node_logs)


PARAMS = RobotWorkload  # the fields `bench --param` may name (run takes them as **params)


def run(**params: Any) -> dict[str, Any]:
    """Both settings, one after the other (TypeError for an unknown parameter)."""
    setting = RobotWorkload(**params)
    joints = RANDOM_CONFIGS[setting.model].output_action_dim
    logs = Path(tempfile.mkdtemp(prefix="oxygen_robot_"))
    summaries = {}
    for mode in MODES:
        namespaces = ("",) if mode == "shared" else ("", ARM_NAMESPACE)
        with engine_window(logs / f"{mode}.log", mode, None, setting.model, engine_parameters(setting),
                           namespaces, arm_nodes(mode, setting, joints)) as graph:  # fmt: skip
            driven = drive(graph, mode, setting, _lost(graph))
            (logs / f"{mode}_instruction_node.log").write_text("".join(f"{line}\n" for line in driven.warnings))
            summaries[mode] = summarize(driven) | {"engine_restarts": graph.restarts(),
                                                   "node_restarts": graph.restarts(engines=False)}  # fmt: skip
    metrics: dict[str, Any] = {"chunk_window_ms": setting.chunk_window_s * 1e3}
    for mode, summary in summaries.items():
        metrics |= {f"{name}_{mode}": value for name, value in summary.items() if not isinstance(value, (dict, str))}
    details: dict[str, Any] = {mode: {k: v for k, v in summary.items() if isinstance(v, (dict, str))}
                               for mode, summary in summaries.items()}  # fmt: skip
    details["node_logs"] = str(logs)
    return result("robot", metrics, details, asdict(setting))


def _lost(graph: EngineProcesses) -> Callable[[], str]:
    """Why the window cannot end well ('' while it can): a node given up on, or arm_sim or instruction_node restarted
    (a goal does not survive its node's crash: its result would never come)."""
    def why() -> str:
        restarted = graph.restarts(engines=False)
        return graph.given_up() or (f"arm_sim or instruction_node crashed ({restarted} restarts)" if restarted else "")

    return why


def arm_nodes(mode: str, setting: RobotWorkload, joints: int) -> dict[NodeSpec, dict[str, Any]]:
    """arm_sim and instruction_node, each a process, with their parameters; the isolated setting's instruction_node
    asks the arm's own engine (in ARM_NAMESPACE)."""
    parameters = arm_parameters(setting, joints)
    remote = inference_remappings(f"/{ARM_NAMESPACE}") if mode == "isolated" else ()
    return {NodeSpec(ARM_SIM, "arm_sim"): parameters[ARM_SIM],
            NodeSpec(INSTRUCTION_NODE, "instruction_node", arguments=remote): parameters[INSTRUCTION_NODE]}


def summarize(driven: Drive) -> dict[str, Any]:
    goal, answers, elapsed_s = driven.goal, driven.answers, driven.elapsed_s
    out = goal.result
    latencies = sorted(latency for ok, latency, _ in answers if ok)
    return {
        "action_miss_rate": out.chunks_missed / out.chunks_asked if out.chunks_asked else 1.0,
        "action_latency_p50_ms": out.latency_p50_ms,
        "action_latency_p99_ms": out.latency_p99_ms,
        "underruns": out.underruns,
        "chunks_asked": out.chunks_asked,
        "chunks_sent": out.chunks_sent,
        "chunks_missed": out.chunks_missed,
        "vqa_answers_per_s": len(latencies) / elapsed_s,
        "vqa_p99_latency_ms": percentile(latencies, 0.99) if latencies else 0.0,
        "goal": f"status {goal.status}: {out.error_code or 'OK'} {out.message}".strip(),
        "vqa_errors": dict(Counter(code for ok, _, code in answers if not ok)),
        "arm_warnings": {"count": len(driven.warnings), "first": driven.warnings[:SHOWN_WARNINGS]},
    }
