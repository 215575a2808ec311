"""`bench --suite paper` at toy sizes: the three modes do the paper's per-frame work, the metrics add up, and the
sweep is plotted."""

import math

import torch

from oxygen_ros.bench import paper_suite
from oxygen_ros.cli.bench import SUITES
from oxygen_ros.cli.main import build_parser
from oxygen_ros.config import EngineConfig
from oxygen_ros.bench.frames import Mode
from oxygen_ros.models.registry import load_model


def test_paper_suite_measures_the_three_modes():
    out = paper_suite.run(N=2, M=4, k=2, frames=2, images=0, kv_mib=32)
    assert out["params"]["model"] == "pi05-random-tiny"  # the faithful pi0.5 prefix, at random weights
    m = out["metrics"]
    for mode in Mode:
        assert m[f"{mode}_frame_latency_ms"] > 0 and math.isclose(
            m[f"{mode}_action_hz"], 50 * 1e3 / m[f"{mode}_frame_latency_ms"], rel_tol=1e-9  # pi0.5's chunk of 50
        )
        parts = sum(m[f"{mode}_{phase}_ms"] for phase in ("prefill", "denoise", "decode", "other"))
        assert math.isclose(parts, m[f"{mode}_frame_latency_ms"], rel_tol=1e-6)
    # one language request per frame: M - 1 decode steps after its own prefill; M when it joins the shared prefix
    # (computing only its tail, a decode-sized step); k per frame with continuous batching
    assert m["baseline_decode_steps_per_frame"] == 3 and m["shared_kv_decode_steps_per_frame"] == 4
    assert m["continuous_batching_decode_steps_per_frame"] == 2
    assert m["baseline_prefill_ms"] > m["shared_kv_prefill_ms"] * 1.2  # the isolated text prefill is extra work
    assert m["speedup_cb_vs_baseline"] == m["baseline_frame_latency_ms"] / m["continuous_batching_frame_latency_ms"]
    assert len(out["details"]["timeline"]["continuous_batching"]) == 2


def test_sweep_is_plotted(tmp_path):
    torch.set_num_threads(1)
    bundle = load_model("pi05-random-tiny", torch.device("cpu"), torch.float32)
    base = paper_suite.Setting(N=2, M=4, k=2, frames=1, warmup=0, arrival="poisson", rate=1.5, images=0, seed=0)
    points = paper_suite.run_sweep(bundle, EngineConfig(kv_cache_bytes=32 << 20), base, {"N": (1, 2), "k": (1, 4)})
    assert [(p["vary"], p["N"], p["k"]) for p in points] == [("N", 1, 2), ("N", 2, 2), ("k", 2, 1), ("k", 2, 4)]
    assert all(set(p["modes"]) == set(Mode) for p in points)
    assert [p["modes"][Mode.CONTINUOUS_BATCHING]["decode_steps_per_frame"] for p in points[2:]] == [1, 4]
    png = paper_suite.plot_sweep(points, str(tmp_path / "sweep.png"), "toy sizes")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_bench_cli_knows_the_paper_suite():
    assert build_parser().parse_args(["bench", "--suite", "paper"]).suite == "paper"
    assert SUITES["paper"] == "oxygen_ros.bench.paper_suite"
