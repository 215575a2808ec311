"""The demo's pictures: the inference node's pool image at the most shared moment, and a timeline of which task ran
when (the action stream's chunks against their tick deadlines, the base's commands, the KV blocks each task type
held in the inference node, the VQA requests) over the pool's use."""

from pathlib import Path

from oxygen_ros.cli.demo_metrics import TASK_TYPES, ChunkTiming, held_blocks, shared_by_all
from oxygen_ros.cli.demo_record import Recorder

COLOURS = {"vqa": "#2a6fbb", "instruction": "#d9822b", "navigation": "#3a9a4a"}


def write_pool_image(msg, path: Path) -> None:
    import cv2

    from oxygen_ros.nodes.convert import image_to_rgb

    cv2.imwrite(str(path), cv2.cvtColor(image_to_rgb(msg), cv2.COLOR_RGB2BGR))


def _held_spans(rec: Recorder, task_type: str) -> list[tuple[float, float]]:
    """(start, width) runs of pool snapshots in which some task of ``task_type`` held KV blocks."""
    spans: list[tuple[float, float]] = []
    begin = last = None
    for t, stats in rec.pool:
        if any(task.task_type == task_type and task.blocks for task in stats.tasks):
            begin = t if begin is None else begin
            last = t
        elif begin is not None:
            spans.append((begin, t - begin))
            begin = None
    if begin is not None:
        spans.append((begin, max(last - begin, 0.05)))
    return spans


def write_timeline(rec: Recorder, timing: ChunkTiming, rate_hz: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, pool_ax) = plt.subplots(2, 1, figsize=(11, 5.2), sharex=True, height_ratios=[3, 1.3])
    rows = ["instruction: /arm/action_chunk", "navigation: /cmd_vel"]
    rows += [f"inference node: {t} KV" for t in TASK_TYPES] + ["/vqa/ask requests"]
    y = {name: len(rows) - 1 - i for i, name in enumerate(rows)}

    half = 0.5 / rate_hz
    row = y["instruction: /arm/action_chunk"]
    ax.vlines(
        [d + half for d in timing.due],
        row - 0.4,
        row + 0.4,
        colors="#bbbbbb",
        linewidth=0.6,
        label="tick deadline (due + half a period)",
    )
    ax.vlines(rec.chunks, row - 0.3, row + 0.3, colors=COLOURS["instruction"], linewidth=1.0, label="chunk arrived")
    if timing.missed:
        ax.plot(timing.missed, [row] * len(timing.missed), "rx", label="tick missed")

    row = y["navigation: /cmd_vel"]
    moving = [t for t, v, w in rec.cmd_vel if v or w]
    stopped = [t for t, v, w in rec.cmd_vel if not (v or w)]
    ax.vlines(moving, row - 0.3, row + 0.3, colors=COLOURS["navigation"], linewidth=1.0, label="drive command")
    ax.vlines(stopped, row - 0.3, row + 0.3, colors="red", linewidth=1.5, label="stop (zero Twist)")

    for task_type in TASK_TYPES:
        row = y[f"inference node: {task_type} KV"]
        ax.broken_barh(_held_spans(rec, task_type), (row - 0.3, 0.6), color=COLOURS[task_type], alpha=0.8)
    row = y["/vqa/ask requests"]
    for i, span in enumerate(rec.requests):
        top = row - 0.35 + 0.7 * (i + 0.5) / len(rec.requests)
        end = span.end if span.end is not None else rec.now()
        ax.plot([span.start, end], [top, top], color=COLOURS["vqa"], linewidth=3, solid_capstyle="butt")
    ax.set_yticks(list(y.values()), list(y))
    ax.legend(loc="upper right", fontsize=7, ncols=5)
    ax.set_ylim(-0.6, len(rows) - 0.1 + 0.8)
    ax.set_title("three tasks at once on one inference node: which task ran when")

    times = [t for t, _ in rec.pool]
    pool_ax.plot(times, [held_blocks(s) for _, s in rec.pool], label="held")
    pool_ax.plot(times, [s.shared_blocks for _, s in rec.pool], label="shared")
    pool_ax.plot(times, [shared_by_all(s) for _, s in rec.pool], label="shared by all three task types (at least)")
    pool_ax.set_ylabel("KV blocks")
    pool_ax.set_ylim(0, 1.5 * max((held_blocks(s) for _, s in rec.pool), default=1))
    pool_ax.set_xlabel("seconds since the demo started the tasks")
    pool_ax.legend(loc="upper left", fontsize=7, ncols=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
