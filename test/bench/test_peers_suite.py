"""`bench --suite peers` at tiny sizes, without the llama.cpp peer (it is built by `make peers`, never by CI): every
metric ours and transformers give is measured, the plot is written, and the absent peer is said, not faked."""

import math

from oxygen_ros.bench import peers_suite
from oxygen_ros.cli.bench import SUITES


def test_peers_suite_measures_ours_and_transformers(tmp_path, monkeypatch, capsys):
    assert SUITES["peers"] == "oxygen_ros.bench.peers_suite"
    monkeypatch.setattr(peers_suite, "_peers_python", lambda: None)
    plot = tmp_path / "peers.png"
    out = peers_suite.run(ns="1,2", new_tokens=3, batch1_tokens=4, prefix_tokens=40, hf_max_n=2, plot=str(plot),
                          bf16_weights=1, int8_weights=1, q4_1_weights=1, text_tokens=64)  # fmt: skip
    metrics = out["metrics"]
    assert "ratio_vs_llamacpp_n2" not in metrics and "no llama.cpp peer" in out["details"]["llamacpp"]
    assert "make peers" in capsys.readouterr().err
    for name in ("batch1_tokens_per_s", "batch1_ratio_vs_hf", "batch1_fraction_of_bound", "bound_tokens_per_s",
                 "tokens_per_s_n1", "tokens_per_s_n2", "bf16_weights_batch1_tokens_per_s",
                 "bf16_weights_tokens_per_s_n2", "bf16_weights_batch1_fraction_of_bound",
                 "int8_weights_batch1_tokens_per_s", "int8_weights_tokens_per_s_n2",
                 "int8_weights_batch1_fraction_of_bound", "q4_1_weights_batch1_tokens_per_s",
                 "q4_1_weights_tokens_per_s_n2", "q4_1_weights_batch1_fraction_of_bound", "n1_fraction_of_gemm_bound",
                 "n2_fraction_of_gemm_bound"):  # fmt: skip
        assert math.isfinite(metrics[name]) and metrics[name] > 0, name
    assert 0.0 <= metrics["bf16_weights_greedy_agreement"] <= 1.0
    assert 0.0 <= metrics["int8_weights_greedy_agreement"] <= 1.0
    assert metrics["q4_1_weights_greedy_agreement"] == 1.0  # the file's blocks: our fp32 weights, its answers
    # teacher-forced over the text, eight rows at a time through the stored rows: Q4_1's are fp32's values
    assert metrics["q4_1_weights_teacher_forced_top1"] == 1.0 and abs(metrics["q4_1_weights_kl"]) < 1e-5
    for name in ("bf16", "int8"):
        assert 0.8 <= metrics[f"{name}_weights_teacher_forced_top1"] <= 1.0 and 0 < metrics[f"{name}_weights_kl"] < 0.1
    details = out["details"]
    assert details["read_bandwidth_gb_s"] > 0.5
    # no engine computes faster than its own arithmetic at the best product rate measured: below 1, by a margin
    assert all(0 < metrics[f"n{n}_fraction_of_gemm_bound"] < 1 for n in (1, 2))
    assert all(f > 1 for f in details["gemm_gflop_per_s_probes"])
    assert details["weight_bytes_per_token"] == 4 * (30 * (576 * (576 + 2 * 192) + 576 * 576 + 3 * 576 * 1536)
                                                     + 49152 * 576)  # fmt: skip  SmolLM2-135M, fp32
    # a byte a weight plus a 4-byte scale per 32 (every row's length, 576 or 1536, is a multiple of 32)
    assert details["weight_bytes_per_token_stored"]["int8"] == details["weight_bytes_per_token"] * 9 // 32
    # Q4_1 layers: 20 bytes per 32 weights; the head int8
    layers, head = 30 * (576 * (576 + 2 * 192) + 576 * 576 + 3 * 576 * 1536), 49152 * 576
    assert details["weight_bytes_per_token_stored"]["q4_1"] == layers * 20 // 32 + head * 36 // 32
    for n in (1, 2):
        assert len(details["ours"]["shared"][n]["ttft_s"]) == n and len(details["ours"]["shared"][n]["tokens"]) == n
        assert len(details["transformers"]["shared"][n]["ttft_s"]) == n
    assert plot.stat().st_size > 10_000


def test_llamacpp_peer_scores_the_text_against_the_fp32_distributions(tmp_path, monkeypatch):
    """The peer's teacher-forced side (run by the peers venv, never in CI) over a stand-in for llama_cpp.Llama whose
    logits are known: row i of its scores predicts token i + 1, as TextReference's rows do; logits equal to the
    reference give top-1 1.0 and KL 0, one position's argmax moved gives 1 - 1/n and a positive KL."""
    import importlib.util
    import sys
    import types

    import numpy as np

    rng = np.random.default_rng(0)
    ids, vocab = [5, 9, 2, 7, 3, 8], 11
    logits = rng.normal(size=(len(ids), vocab))  # the last row scores past the text: never read
    reference = logits[:-1] - np.log(np.exp(logits[:-1]).sum(axis=1, keepdims=True))
    np.save(tmp_path / "reference.npy", reference.astype(np.float32))

    class Llama:  # what _teacher_forced uses of llama_cpp.Llama
        def __init__(self, *args, **kwargs):
            assert kwargs["logits_all"] is True
            self.scores = np.zeros((64, vocab), dtype=np.float32)

        def eval(self, tokens):
            assert tokens == ids
            self.scores[: len(tokens)] = shown

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=Llama))
    spec = importlib.util.spec_from_file_location("llamacpp_peer_under_test", peers_suite.Path(peers_suite.__file__)
                                                  .with_name("llamacpp_peer.py"))  # fmt: skip
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    job = {"gguf": "unused.gguf", "n_ctx": 64, "threads": 1,
           "teacher_forced": {"ids": ids, "reference": str(tmp_path / "reference.npy")}}  # fmt: skip
    shown = logits.astype(np.float32)
    same = peer._teacher_forced(job)
    assert same["top1"] == 1.0 and abs(same["kl"]) < 1e-6 and same["tokens"] == len(ids)
    shown = logits.astype(np.float32).copy()
    shown[2, reference[2].argmax()] -= 100.0  # position 2 now prefers another next token
    moved = peer._teacher_forced(job)
    assert moved["top1"] == 1 - 1 / (len(ids) - 1) and moved["kl"] > 0.01
