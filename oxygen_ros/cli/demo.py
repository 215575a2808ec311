"""`oxygen-ros demo`: bring the graph up with SmolLM2 and the simulated camera, then run the three task nodes at the
same time (the instruction stream at 10 Hz, a drive to the table, questions about the camera frame) and show what
the one inference node and its shared KV pool did.

Everything printed is measured in this run through the nodes' own interfaces: the answers and narration are the
real model's, chunk and command times are arrivals on /arm/action_chunk and /cmd_vel, pool numbers are
/oxygen/get_pool_stats snapshots polled while the tasks run, tokens and reused prefix blocks are the inference
node's /diagnostics counters. Writes the node's pool image at the most shared moment and a timeline to ``--out``.

The demo runs every node in this one process (``bringup.Graph``), unlike `oxygen-ros up` (a process per node, as on
the robot): it is a 30-second showcase, not a robot that must survive a crashing node, and on two cores five
interpreters each importing torch would add seconds to its start and take CPU from the model it measures. The
nodes, their interfaces and the YAML are the same either way.
"""

import argparse
import sys
import time
from pathlib import Path

DEMO_POOL_BYTES = 64 << 20  # ~90 SmolLM2 blocks: small enough that the pool picture shows every block
QUESTIONS = ("How many objects are on the table?", "Which object is closest to the robot?", "Is the path ahead clear?")
REACH_M = 0.45  # the drive ends this far south of the object the arm is told to take: in front of the table
NAV_GRACE_S = 15.0  # how long the drive may go on after the instruction stream before the demo cancels it
SETTLE_S = 60.0  # longest wait, after the tasks ended, for the language requests still in the pool to finish
WAIT_S = 30.0  # longest wait for a server, the first frame or an answer to appear
POLL_S = 0.2  # pool snapshots while the tasks run: often enough for the timeline, cheap for the node


def register(subparsers) -> None:
    from oxygen_ros.cli.up import add_graph_arguments

    parser = subparsers.add_parser(
        "demo",
        help="VQA, instruction following and navigation at once on one graph (every node in this one process: a "
        "short showcase; `up` runs a process per node)",
    )
    add_graph_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="where the PNGs go")
    parser.add_argument("--rate", type=float, default=10.0, metavar="HZ", help="the instruction stream's rate")
    parser.add_argument("--duration", type=float, default=20.0, metavar="S", help="how long the stream runs")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.bringup import Graph
    from oxygen_ros.cli.up import preset_values

    try:  # the config's values < the preset's < the demo's pool size < --model
        overrides = preset_values(args) | {"kv_cache_bytes": DEMO_POOL_BYTES}
    except ValueError as exc:  # a bad argument, as `up` exits for it
        print(f"demo failed: {exc}", file=sys.stderr)
        return 2
    try:
        with Graph(args.config, args.model, overrides) as graph:
            return _demo(graph, args)
    except (FileNotFoundError, RuntimeError, ValueError, TimeoutError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1


def _target(image) -> tuple[str, float, float]:
    """The object closest to the robot (the one the arm is told to take) and the drive's end in front of it, from
    the detections in the camera ``image``."""
    from oxygen_ros.nodes.convert import image_to_rgb
    from oxygen_ros.perception.detect import detect

    objects = [o for o in detect(image_to_rgb(image)).objects if o.distance_cm is not None]
    if not objects:
        raise RuntimeError("the camera frame shows no object to take")
    closest = min(objects, key=lambda o: o.distance_cm)
    return f"{closest.colour} {closest.shape}", closest.x_cm / 100.0, closest.y_cm / 100.0 - REACH_M


def _demo(graph, args: argparse.Namespace) -> int:
    from oxygen_ros.cli.demo_record import Recorder

    node = graph.add_client("oxygen_demo")
    rec = Recorder(node)
    clients = _connect(node)
    name, x, y = _target(rec.first_image(WAIT_S))
    instruction = f"pick up the {name}"
    before = rec.counters_after(0.0)
    frame, goals, questions = _start(rec, clients, instruction, name, (x, y), args)
    results = _watch(rec, clients["stats"], goals, questions, args)
    idle = rec.now()
    after = rec.counters_after(idle)
    answers = [q.result() for q in questions]
    timing = _report(rec, frame, instruction, (x, y), answers, results, before, after, idle, args)
    _pictures(rec, timing, args)
    return 0 if all(a.success for a in answers) and all(r.success for r in results.values()) else 1


def _connect(node) -> dict:
    """Clients of the task nodes and the pool stats, once each server is there. ``node`` already spins on the
    graph's executor: its action clients are the ones safe to create then (see nodes/action_client.py)."""
    from oxygen_ros.action import FollowInstruction, Navigate
    from oxygen_ros.nodes.action_client import ActionClient
    from oxygen_ros.srv import AskQuestion, GetPoolStats

    clients = {
        "/vqa/ask": node.create_client(AskQuestion, "/vqa/ask"),
        "stats": node.create_client(GetPoolStats, "/oxygen/get_pool_stats"),
        "/follow_instruction": ActionClient(node, FollowInstruction, "/follow_instruction"),
        "/navigate": ActionClient(node, Navigate, "/navigate"),
    }
    for name, client in clients.items():
        ready = client.wait_for_server if isinstance(client, ActionClient) else client.wait_for_service
        if not ready(timeout_sec=WAIT_S):
            raise RuntimeError(f"{name} did not appear within {WAIT_S:g} s")
    return clients


def _start(rec, clients: dict, instruction: str, name: str, target: tuple[float, float], args: argparse.Namespace):
    """Start the three tasks; the frame they look at, the goal handles by task and the questions' futures.

    The arm first: its goal asks the inference node for actions before it streams, and that answer must not queue
    behind the other tasks' prefill. Once it streams, its narration, the drive's reasoning and the questions all
    read the frame of this moment, before the robot moves, so their prompts share that frame's prefix blocks."""
    from oxygen_ros.action import FollowInstruction
    from oxygen_ros.cli.demo_record import Span, wait_for
    from oxygen_ros.cli.navigate import navigate_goal
    from oxygen_ros.nodes.polling import poll_until
    from oxygen_ros.srv import AskQuestion

    rec.begin()
    goal = FollowInstruction.Goal(instruction=instruction, rate_hz=args.rate, duration_s=args.duration)
    arm = wait_for(
        clients["/follow_instruction"].send_goal_async(goal, rec.on_narration), WAIT_S, "/follow_instruction"
    )
    poll_until(lambda: rec.chunks or not arm.accepted, WAIT_S, "action chunk on /arm/action_chunk")
    frame = rec.last_frame()
    goal = navigate_goal(*target, instruction=f"stop in front of the {name}")
    base = clients["/navigate"].send_goal_async(goal, rec.on_reasoning)
    questions = []
    for question in QUESTIONS:
        rec.requests.append(Span(question, rec.now()))
        questions.append(clients["/vqa/ask"].call_async(AskQuestion.Request(question=question)))
    base = wait_for(base, WAIT_S, "/navigate")
    if not (arm.accepted and base.accepted):
        raise RuntimeError("a task node rejected the demo's goal")
    return frame, {"instruction": arm, "navigation": base}, questions


def _watch(rec, stats, goals: dict, questions: list, args: argparse.Namespace) -> dict:
    """Snapshot the pool until every task ended and the pool is idle (the language requests still decoding when
    their goal ended are cancelled by it); the goals' results by task. The drive is cancelled if it outlasts the arm by
    NAV_GRACE_S."""
    from oxygen_ros.cli.demo_record import wait_for
    from oxygen_ros.srv import GetPoolStats

    results = {task: handle.get_result_async() for task, handle in goals.items()}
    drive_cancelled = False
    while True:
        rec.pool.append((rec.now(), wait_for(stats.call_async(GetPoolStats.Request()), WAIT_S, "pool stats").stats))
        for span, answer in zip(rec.requests, questions, strict=True):
            if answer.done() and span.end is None:
                span.end = rec.now()
        pool = rec.pool[-1][1]
        if all(r.done() for r in results.values()) and all(q.done() for q in questions):
            if pool.active_requests == 0 and pool.queued_requests == 0:
                return {task: future.result().result for task, future in results.items()}
        elif results["instruction"].done() and rec.now() > args.duration + NAV_GRACE_S and not drive_cancelled:
            goals["navigation"].cancel_goal_async()
            drive_cancelled = True
        if rec.now() > args.duration + NAV_GRACE_S + SETTLE_S:
            raise TimeoutError("the tasks did not finish")
        time.sleep(POLL_S)


def _report(rec, frame, instruction, target, answers, results, before, after, idle, args):
    """Print what each task got; the chunk timing (the timeline draws it too)."""
    from oxygen_ros.cli.demo_metrics import chunk_timing

    print(f"camera frame {frame.observation_id[:12]} when the tasks started:\n{frame.text}\n")
    print(
        f"three tasks at once: {args.duration:g} s of '{instruction}' at {args.rate:g} Hz, a drive to "
        f"({target[0]:.2f}, {target[1]:.2f}) m, {len(QUESTIONS)} questions\n"
    )
    reads_images = rec.pool[-1][1].max_images > 0  # the model reads the frame's pixels, not the scene text
    for span, answer in zip(rec.requests, answers, strict=True):
        print(f"[vqa] {span.label}")
        print(f"  -> {answer.answer}" if answer.success else f"  -> {answer.error_code}: {answer.message}")
        images = f" ({answer.reused_image_tokens} of them the frame's image tokens)" if reads_images else ""
        print(
            f"     {answer.reused_prefix_tokens} prompt tokens reused from the shared pool{images}, "
            f"{answer.latency_ms:.0f} ms"
        )

    timing = chunk_timing(rec.chunks, args.rate, args.duration)
    arm = results["instruction"]
    print(f"[instruction] {instruction}: {_outcome(arm)}")
    print(
        f"  {timing.chunks} chunks on /arm/action_chunk: {timing.achieved_hz:.2f} Hz of {args.rate:g} Hz "
        f"({100 * timing.achieved_hz / args.rate:.0f}%; node: {arm.achieved_rate_hz:.2f} Hz), "
        f"{len(timing.due) - len(timing.missed)} of {len(timing.due)} ticks met, "
        f"latest chunk {timing.worst_late_ms:.0f} ms after its tick"
    )
    for t, text in rec.narration:
        print(f"  narration at {t:4.1f} s: {text}")

    base = results["navigation"]
    stops = sum(1 for _, v, w in rec.cmd_vel if not (v or w))
    print(
        f"[navigation] to ({target[0]:.2f}, {target[1]:.2f}): {_outcome(base)}, "
        f"{base.distance_remaining:.2f} m left; {len(rec.cmd_vel)} /cmd_vel, {stops} of them stops"
    )
    for t, text in rec.reasoning:
        print(f"  reasoning at {t:4.1f} s: {text}")
    _report_pool(rec, before, after, idle)
    return timing


def _report_pool(rec, before: dict[str, int], after: dict[str, int], idle: float) -> None:
    """The inference node's side: tokens decoded and prefix blocks reused over the run, and the pool at its most
    shared moment."""
    from oxygen_ros.cli.demo_metrics import TASK_TYPES, held_blocks, most_shared, per_type, read_by_every_type, shared_by_all

    tokens = after["generated_tokens"] - before["generated_tokens"]
    reused = after["prefix_hit_blocks"] - before["prefix_hit_blocks"]
    final = rec.pool[-1][1]
    print(
        f"\nlanguage: {tokens} tokens in {idle:.1f} s for the three tasks: {tokens / idle:.1f} tokens/s; "
        f"{reused * final.block_size} prompt tokens ({reused} blocks) reused from the shared pool"
    )
    computed_once = max(read_by_every_type(stats) for _, stats in rec.pool)
    print(f"{computed_once} blocks computed once and read by requests of all {len(TASK_TYPES)} task types")
    at, peak = most_shared(rec.pool)
    print(
        f"pool at its most shared ({at:.1f} s): {peak.total_blocks} blocks of {peak.block_size} tokens, "
        f"{held_blocks(peak)} held, {peak.shared_blocks} shared, at least {shared_by_all(peak)} of them by all "
        "three task types"
    )
    tasks = per_type(peak).values()
    print("  " + ", ".join(f"{t.task_id} ({t.task_type}): {t.blocks} blocks, {t.shared_blocks} shared" for t in tasks))
    print(
        f"after the tasks: {final.free_blocks} free, {final.cached_blocks} cached (reusable), "
        f"prefix hit rate {final.prefix_hit_rate:.2f}"
    )


def _outcome(result) -> str:
    return "done" if result.success else f"{result.error_code}: {result.message}"


def _pictures(rec, timing, args: argparse.Namespace) -> None:
    from oxygen_ros.cli.demo_metrics import most_shared
    from oxygen_ros.cli.demo_plot import write_pool_image, write_timeline

    args.out.mkdir(parents=True, exist_ok=True)
    at, _ = most_shared(rec.pool)
    if rec.pool_images:  # the node's picture nearest the most shared snapshot
        _, image = min(rec.pool_images, key=lambda item: abs(item[0] - at))
        write_pool_image(image, args.out / "pool.png")
    write_timeline(rec, timing, args.rate, args.out / "timeline.png")
    print(f"wrote {args.out}/pool.png and {args.out}/timeline.png")
