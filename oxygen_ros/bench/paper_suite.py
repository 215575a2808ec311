"""`bench --suite paper`: the OxyGen paper's experiment (arXiv 2603.14371), same engine, three modes, by default on
pi0.5 as it runs (``pi05-random-tiny``: the whole prefix, images + prompt with the state, bidirectional; random
weights at pi0.5's tiny shapes, chunk 50).

Every frame a new observation (``images`` camera images + state) arrives with one action request (N denoise steps)
and ``rate`` language requests on average (uniform or Poisson) that decode M tokens each.  The modes
(``oxygen_ros.bench.frames``): ``baseline`` (isolated prefills, sequential full decode), ``shared_kv`` (one prefill,
full decode) and ``continuous_batching`` (one prefill, the chunk, then k decode steps for every active request).

The paper's metrics: frame latency, action Hz = horizon / frame latency, language tokens/s; speedup = baseline frame
latency / mode frame latency.  Each mode runs on its own engine; warm-up frames (continuous batching needs
ceil(M / k) + 1 to reach its steady number of active requests) are excluded, and the measured frames of the three
modes are interleaved so load on a shared machine hits all of them alike.  A per-phase breakdown (prefill, denoise,
decode ms per frame) and ``speedup_bound_if_decode_free`` (baseline latency over continuous batching's prefill +
denoise) show how much of a frame continuous batching can save at all on this hardware.
"""

import math
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from oxygen_ros.bench.report import result
from oxygen_ros.bench.robot_frames import language_arrivals, robot_frames
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.device import resolve_dtype, torch_device
from oxygen_ros.engine.engine import Engine
from oxygen_ros.bench.frames import PHASES, FrameDriver, FrameRecord, Mode
from oxygen_ros.models.registry import ModelBundle, load_model

SWEEP = {"N": (1, 5, 10), "M": (10, 30, 60), "k": (1, 3, 5, 10, 30)}
TIMELINE_FRAMES = 2  # measured frames per mode whose step timeline goes into the details


@dataclass(frozen=True)
class Setting:
    N: int  # denoise steps per action chunk
    M: int  # tokens per language request
    k: int  # decode steps per frame (continuous batching)
    frames: int  # measured frames
    warmup: int  # frames before them; -1 = ceil(M / k) + 1
    arrival: str
    rate: float  # language requests per frame
    images: int
    seed: int

    def warmup_frames(self, mode: Mode) -> int:
        """Frames before the measured ones: as given, or by default enough for the mode's steady state (one for the
        modes that finish every request within its frame)."""
        if self.warmup >= 0:
            return self.warmup
        return math.ceil(self.M / self.k) + 1 if mode is Mode.CONTINUOUS_BATCHING else 1


def run(
    N: int = 10,
    M: int = 30,
    k: int = 5,
    frames: int = 50,
    warmup: int = -1,
    arrival: str = "uniform",
    rate: float = 1.0,
    images: int = 3,
    model: str = "pi05-random-tiny",
    kv_mib: int = 512,
    threads: int = 1,
    seed: int = 0,
    sweep: int = 0,
    sweep_frames: int = 4,
    plot: str = "docs/paper_sweep.png",
) -> dict[str, Any]:
    """The three modes at one setting; with ``sweep=1`` also N, M and k varied one at a time, plotted to ``plot``."""
    torch.set_num_threads(threads)  # the tiny VLAs' matmuls are small: one thread is fastest and steady under load
    setting = Setting(N, M, k, frames, warmup, arrival, rate, images, seed)
    config = EngineConfig(model=model, kv_cache_bytes=kv_mib << 20, max_model_len=2048, seed=seed)
    device = torch_device(config.device)
    bundle = load_model(model, device, resolve_dtype(config.dtype, device), seed)
    records = measure(bundle, config, setting)
    summaries = {mode: summarize(recs, bundle) for mode, recs in records.items()}
    metrics = headline(summaries)
    for mode, summary in summaries.items():
        metrics |= {f"{mode}_{name}": value for name, value in summary.items()}
    details: dict[str, Any] = {"timeline": {mode: timeline(recs[:TIMELINE_FRAMES]) for mode, recs in records.items()}}
    if sweep:
        points = run_sweep(bundle, config, replace(setting, frames=sweep_frames))
        details["sweep"] = points
        title = f"{model}, {images} image(s), {arrival} rate {rate}; others at N={N}, M={M}, k={k}"
        details["sweep_plot"] = plot_sweep(points, plot, title)
    params = asdict(setting) | {"model": model, "kv_mib": kv_mib, "threads": threads, "sweep": sweep}
    return result("paper", metrics, details, params)


def measure(
    bundle: ModelBundle, config: EngineConfig, setting: Setting, modes: tuple[Mode, ...] = tuple(Mode)
) -> dict[Mode, list[FrameRecord]]:
    """Measured frame records per mode: warm-up per mode, then the measured frames interleaved across modes."""
    longest_warmup = max(setting.warmup_frames(m) for m in modes)
    arrivals = language_arrivals(setting.arrival, setting.rate, longest_warmup + setting.frames, setting.seed)
    frames = robot_frames(arrivals, setting.M, setting.images, seed=setting.seed)
    drivers = {}
    for mode in modes:
        engine = Engine(replace(config, num_denoise_steps=setting.N), bundle=bundle)
        drivers[mode] = FrameDriver(engine, mode, steps_per_frame=setting.k)
        warm = frames[longest_warmup - setting.warmup_frames(mode) : longest_warmup]
        for frame in tqdm(warm, desc=f"warm-up {mode}", unit="frame", leave=False):
            drivers[mode].run_frame(frame)
    records: dict[Mode, list[FrameRecord]] = {mode: [] for mode in modes}
    for frame in tqdm(frames[longest_warmup:], desc=f"N={setting.N} M={setting.M} k={setting.k}", unit="frame"):
        for mode, driver in drivers.items():
            records[mode].append(driver.run_frame(frame))
    return records


def summarize(records: list[FrameRecord], bundle: ModelBundle) -> dict[str, float]:
    """The paper's per-setting metrics plus the mean time per phase and the measured cost of one step of each kind."""
    seconds = sum(r.latency_s for r in records)
    per_frame = {p: statistics.fmean(r.phase_s()[p] for r in records) for p in (*PHASES, "other")}
    steps = [s for r in records for s in r.steps]
    decode_steps = [s.forward_s for s in steps if s.phase == "decode"]
    return {
        "frame_latency_ms": 1e3 * seconds / len(records),
        "action_hz": bundle.model.config.action_horizon * len(records) / seconds,
        "language_tps": sum(r.tokens_decoded for r in records) / seconds,
        **{f"{phase}_ms": 1e3 * value for phase, value in per_frame.items()},
        "prefill_step_ms": 1e3 * statistics.fmean(s.forward_s for s in steps if s.phase == "prefill"),
        "decode_step_ms": 1e3 * statistics.fmean(decode_steps) if decode_steps else 0.0,
        "decode_steps_per_frame": len(decode_steps) / len(records),
    }


def headline(summaries: dict[Mode, dict[str, float]]) -> dict[str, float]:
    base = summaries[Mode.BASELINE]["frame_latency_ms"]
    cb = summaries[Mode.CONTINUOUS_BATCHING]
    return {
        "speedup_cb_vs_baseline": base / cb["frame_latency_ms"],
        "speedup_shared_kv_vs_baseline": base / summaries[Mode.SHARED_KV]["frame_latency_ms"],
        "speedup_bound_if_decode_free": base / (cb["prefill_ms"] + cb["denoise_ms"]),
    }


def timeline(records: list[FrameRecord]) -> list[dict[str, Any]]:
    """Steps of the given frames in ms from each frame's start: which task computed what, when (for a PNG later)."""
    return [
        {
            "frame": r.index,
            "steps": [
                {"start_ms": 1e3 * (s.start_s - r.start_s), "end_ms": 1e3 * (s.end_s - r.start_s),
                 "denoise_ms": 1e3 * s.denoise_s, "phase": s.phase, "work": s.work}
                for s in r.steps
            ],
        }  # fmt: skip
        for r in records
    ]


def run_sweep(
    bundle: ModelBundle, config: EngineConfig, base: Setting, grid: dict[str, tuple[int, ...]] = SWEEP
) -> list[dict[str, Any]]:
    """Vary the parameters of ``grid`` (N, M, k) one at a time around ``base``.  Every point measures all three modes
    interleaved, even where baseline and shared_kv do not depend on the parameter (k): a measurement reused from
    minutes earlier would compare different loads of a shared machine."""
    points = []
    for name, values in grid.items():
        for value in tqdm(values, desc=f"sweep {name}", unit="point"):
            setting = replace(base, **{name: value})
            by_mode = {m: summarize(recs, bundle) for m, recs in measure(bundle, config, setting).items()}
            points.append({"vary": name, **asdict(setting), **headline(by_mode), "modes": by_mode})
    return points


def plot_sweep(points: list[dict[str, Any]], path: str, title: str) -> str:
    """Speedups (top) and frame latency per mode (bottom) against each swept parameter; returns the PNG's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = list(dict.fromkeys(p["vary"] for p in points))
    fig, axes = plt.subplots(2, len(swept), figsize=(4 * len(swept), 7), squeeze=False)
    for col, name in enumerate(swept):
        sel = [p for p in points if p["vary"] == name]
        xs = [p[name] for p in sel]
        top, bottom = axes[0][col], axes[1][col]
        top.plot(xs, [p["speedup_cb_vs_baseline"] for p in sel], "o-", label="continuous_batching")
        top.plot(xs, [p["speedup_shared_kv_vs_baseline"] for p in sel], "s--", label="shared_kv")
        top.set(title=f"speedup vs baseline over {name}", xlabel=name, ylabel="x baseline")
        for mode in Mode:
            bottom.plot(xs, [p["modes"][mode]["frame_latency_ms"] for p in sel], "o-", label=str(mode))
        bottom.set(xlabel=name, ylabel="frame latency (ms)")
    axes[0][0].legend()
    axes[1][0].legend()
    fig.suptitle(f"OxyGen modes, one parameter varied per column ({title})")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
