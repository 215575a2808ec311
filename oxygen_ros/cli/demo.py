"""`oxygen-ros demo`: bring the graph up with SmolLM2 and the simulated camera, then let three tasks ask about the
same camera frame at the same time through `/oxygen/infer`, and show what the shared pool did.

Everything printed is measured in this run: answers come from the real model, reuse and pool numbers from the
inference node.  Writes the node's pool image and a timeline of the three requests to ``--out``.
"""

import argparse
import sys
import time
from pathlib import Path

DEMO_POOL_BYTES = 64 << 20  # ~90 SmolLM2 blocks: small enough that the pool picture shows every block
TASKS = [
    ("vqa", "What objects are on the table?"),
    ("instruction", "Which object is closest to the robot, and where is it?"),
    ("navigation", "Is there an obstacle in front of the robot? How far is it?"),
]


def register(subparsers) -> None:
    from oxygen_ros.cli.up import add_graph_arguments

    parser = subparsers.add_parser("demo", help="three tasks share one camera frame through the running graph")
    add_graph_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="where the PNGs go")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.set_defaults(func=run)


def _wait(future, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not future.done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer to {what} within {timeout:.0f} s")
        time.sleep(0.01)
    return future.result()


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.bringup import Graph

    try:
        with Graph(args.config, args.model, {"kv_cache_bytes": DEMO_POOL_BYTES}) as graph:
            return _demo(graph, args)
    except (FileNotFoundError, RuntimeError, ValueError, TimeoutError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1


def _demo(graph, args: argparse.Namespace) -> int:
    from sensor_msgs.msg import Image

    from oxygen_ros.msg import Observation
    from oxygen_ros.srv import GetPoolStats, Infer

    client = graph.add_client("oxygen_demo")
    frames: list[Observation] = []
    pool_images: list[Image] = []
    client.create_subscription(Observation, "/oxygen/observation", frames.append, 10)
    client.create_subscription(Image, "/oxygen/pool_image", pool_images.append, 10)
    infer = client.create_client(Infer, "/oxygen/infer")
    stats = client.create_client(GetPoolStats, "/oxygen/get_pool_stats")
    if not infer.wait_for_service(timeout_sec=30.0):
        raise RuntimeError("/oxygen/infer did not appear")
    deadline = time.monotonic() + 30.0
    while not frames and time.monotonic() < deadline:
        time.sleep(0.05)
    if not frames:
        raise RuntimeError("no observation from camera_sim within 30 s")
    frame = frames[0]
    print(f"camera frame {frame.observation_id[:12]}: {frame.text}\n")
    request = Infer.Request(prompt="probe", observation_id=frame.observation_id, task_type="generic")
    while _wait(infer.call_async(request), 60.0, "a probe").error_code == "NOT_FOUND":  # the node has not seen it yet
        time.sleep(0.05)

    start = time.monotonic()
    sent = {}
    for task, prompt in TASKS:
        req = Infer.Request(
            task_id=task, task_type=task, prompt=prompt, observation_id=frame.observation_id, want_text=True,
            max_new_tokens=args.max_new_tokens,
        )
        sent[task] = (prompt, infer.call_async(req))
    peak = None
    while not all(future.done() for _, future in sent.values()):
        snapshot = _wait(stats.call_async(GetPoolStats.Request()), 30.0, "pool stats").stats
        if peak is None or snapshot.shared_blocks > peak.shared_blocks:
            peak, peak_images = snapshot, len(pool_images)
        time.sleep(0.05)
    answers = {task: (prompt, _wait(future, 300.0, task)) for task, (prompt, future) in sent.items()}
    wall = time.monotonic() - start

    ok = all(resp.success for _, resp in answers.values())
    total_tokens = sum(resp.generated_tokens for _, resp in answers.values())
    for task, (prompt, resp) in answers.items():
        print(f"[{task}] {prompt}")
        if resp.success:
            print(f"  -> {resp.text.strip()}")
        else:
            print(f"  -> {resp.error_code}: {resp.message}")
        print(
            f"     prompt {resp.prompt_tokens} tokens, {resp.reused_prefix_tokens} reused from the shared pool, "
            f"{resp.generated_tokens} generated, queue {resp.queue_ms:.0f} ms, latency {resp.latency_ms:.0f} ms"
        )
    print(f"\n{total_tokens} tokens in {wall:.1f} s across the three tasks: {total_tokens / wall:.1f} tokens/s")
    if peak is not None:
        print(
            f"pool at its most shared: {peak.total_blocks} blocks of {peak.block_size} tokens, "
            f"{peak.total_blocks - peak.free_blocks - peak.cached_blocks} in use, {peak.shared_blocks} shared; "
            + ", ".join(f"{t.task_id}: {t.blocks} blocks ({t.shared_blocks} shared)" for t in peak.tasks)
        )
    final = _wait(stats.call_async(GetPoolStats.Request()), 30.0, "pool stats").stats
    print(f"after the tasks: {final.free_blocks} free, {final.cached_blocks} cached (reusable), "
          f"prefix hit rate {final.prefix_hit_rate:.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    if pool_images:
        image = pool_images[peak_images - 1 if peak is not None and peak_images else -1]
        _write_pool_image(image, args.out / "pool.png")
    _write_timeline(answers, args.out / "timeline.png")
    print(f"wrote {args.out}/pool.png and {args.out}/timeline.png")
    return 0 if ok else 1


def _write_pool_image(msg, path: Path) -> None:
    import cv2

    from oxygen_ros.nodes.convert import image_to_rgb

    cv2.imwrite(str(path), cv2.cvtColor(image_to_rgb(msg), cv2.COLOR_RGB2BGR))


def _write_timeline(answers: dict, path: Path) -> None:
    """One bar per task: queued (light) then served (dark), as the inference node measured them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 2.4))
    for row, (task, (_, resp)) in enumerate(answers.items()):
        ax.barh(row, resp.queue_ms, color="#bbbbbb")
        ax.barh(row, resp.latency_ms - resp.queue_ms, left=resp.queue_ms, color="#2a6fbb")
    ax.set_yticks(range(len(answers)), list(answers))
    ax.set_xlabel("ms since the request reached the inference node (grey: queued, blue: served)")
    ax.set_title("three tasks on one camera frame, one KV pool")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
