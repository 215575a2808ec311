"""int8 and fp8 KV through the engine's paged pool: SmolLM2 and pi05-causal-tiny run end to end, stats and byte accounting
follow the format, the fp8 calibrator holds its scales over many requests, and bad KV settings fail at startup."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from oxygen_ros.kv.kv_write import stored_tokens
from engine_helpers import make_engine

from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.kv.kv_cache import KVCache, LayerKV
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kernels import Fp8Calibrator, KVBlocks, KVQuantSpec
from oxygen_ros.kernels.quant_spec import FP8_MAX

STORAGE = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}
PROMPTS = ["What is the capital of France?", "Name three primary colors.", "How many legs does a spider have?"]
MAX_NEW = 24


def _greedy(prompts: list[str], max_new: int = MAX_NEW) -> list[GenerateRequest]:
    return [GenerateRequest(p, sampling=SamplingParams(max_new_tokens=max_new, ignore_eos=True)) for p in prompts]


@pytest.fixture(scope="module")
def full_precision_tokens(smollm2_bundle) -> list[list[int]]:
    return [out.token_ids for out in make_engine(smollm2_bundle).generate(_greedy(PROMPTS))]


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_smollm2_greedy_through_a_quantized_pool(smollm2_bundle, full_precision_tokens, kv_dtype):
    """The answers start as at full precision and keep their content; how soon they drift (int8 errors are ~1% of
    a K/V vector, fp8's ~3%) is what `bench --suite quant` measures over many prompts."""
    engine = make_engine(smollm2_bundle, kv_dtype=kv_dtype)
    assert {layer.blocks.k.dtype for layer in engine.kv.layers} == {STORAGE[kv_dtype]}
    outs = engine.generate(_greedy(PROMPTS))
    for out, reference in zip(outs, full_precision_tokens, strict=True):
        assert out.ok and len(out.token_ids) == MAX_NEW
        assert out.token_ids[:2] == reference[:2], out.text
    assert "Paris" in outs[0].text
    assert all(color in outs[1].text.lower() for color in ("red", "blue", "yellow"))


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_stats_report_the_format_and_its_bytes(smollm2_bundle, kv_dtype):
    used: dict[str, dict[str, tuple[str, int, int]]] = {}
    for name in (kv_dtype, "fp16"):
        engine = make_engine(smollm2_bundle, kv_dtype=name)
        for task, prompt in zip(("vqa", "instruction"), PROMPTS, strict=False):
            engine.submit(GenerateRequest(prompt, task_id=task, task_type=task))
        while len(engine.stats().tasks) < 2 or not all(t.blocks for t in engine.stats().tasks):
            engine.step()  # until both prompts hold blocks (one may wait a step to share the other's blocks)
        stats = engine.stats()
        assert stats.bytes_per_block == engine.layout.bytes_per_token * engine.config.block_size
        used[name] = {t.task_id: (t.kv_dtype, t.blocks, t.bytes) for t in stats.tasks}
    for task, (dtype_name, blocks, nbytes) in used[kv_dtype].items():
        fp16_name, fp16_blocks, fp16_bytes = used["fp16"][task]
        assert (dtype_name, fp16_name) == (kv_dtype, "fp16") and blocks == fp16_blocks > 0
        assert nbytes <= 0.57 * fp16_bytes


def _layout(shape: tuple[int, int, int], dtype: torch.dtype) -> KVLayout:
    return KVLayout(*shape, block_size=16, dtype=dtype)


@pytest.mark.parametrize("shape", [(30, 3, 64), (6, 1, 256), (18, 1, 256)], ids=["smollm2", "pi05-causal-tiny", "pi05"])
@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_quantized_tokens_cost_at_most_057_of_fp16_scales_included(shape, kv_dtype):
    layout = _layout(shape, STORAGE[kv_dtype])
    assert layout.bytes_per_token <= 0.57 * _layout(shape, torch.float16).bytes_per_token
    cache = KVCache(layout, num_blocks=3, device=torch.device("cpu"))
    layer_scales = 2 * shape[1] * 4 * shape[0] if kv_dtype == "fp8" else 0  # fp8: one fp32 per layer, plane, head
    assert cache.total_bytes == 3 * layout.bytes_per_block + layer_scales  # the accounting is what is allocated


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_pi05_actions_and_text_through_a_quantized_pool(pi05_tiny, kv_dtype):
    rng = np.random.default_rng(0)
    obs = Observation(images=[rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(3)], state=[0.3])

    def run(name: str):
        engine = make_engine(pi05_tiny, kv_dtype=name)
        request = GenerateRequest("pick up the cup", task_type="vqa", observation=obs, want_actions=True,
                                  sampling=SamplingParams(max_new_tokens=3, seed=5))
        return engine, engine.generate([request])[0]

    engine, out = run(kv_dtype)
    _, reference = run("auto")
    assert {layer.blocks.k.dtype for layer in engine.kv.layers} == {STORAGE[kv_dtype]}
    assert out.ok and out.actions.shape == (10, 32) and len(out.token_ids) == 3
    np.testing.assert_allclose(out.actions, reference.actions, atol=1e-3)
    assert out.token_ids == reference.token_ids


def test_fp8_scales_follow_only_tokens_that_are_stored():
    layer = LayerKV([KVBlocks.allocate(KVQuantSpec.parse("fp8"), 2, 16, 1, 8)], 0)
    stored = torch.ones(4, 1, 8)
    layer.write(stored, stored, [stored_tokens(0, [0, 1, 2, 3], torch.device("cpu"))])
    scales = (layer.blocks.k_scale.clone(), layer.blocks.v_scale.clone())
    unstored = torch.full((4, 1, 8), 1e4)  # e.g. the action expert's K/V: slots -1, never kept
    writes = [w for w in (stored_tokens(0, [-1] * 4, torch.device("cpu")),) if w is not None]
    assert not writes  # nothing to store: the layer is not even asked
    layer.write(unstored, unstored, writes)
    assert torch.equal(layer.blocks.k_scale, scales[0]) and torch.equal(layer.blocks.v_scale, scales[1])
    assert float(layer.calibrators[0].target_scales().max()) < 1.0


def _saturated_codes(engine) -> int:
    """fp8 codes at +-448 in the blocks of running requests: values the scales could not hold."""
    ids = torch.tensor([b for r in engine.active_requests() for b in r.block_table])
    return sum(int((plane[ids].float().abs() >= FP8_MAX).sum()) for layer in engine.kv.layers
               for plane in (layer.blocks.k, layer.blocks.v))


def test_fp8_calibration_holds_over_many_requests(smollm2_bundle):
    """Waves of requests, each longer than the calibrators' window (8 writes here, 128 in the engine, so it forgets
    faster than in service), then the first wave again: the scales settle in the first wave and stay put and
    finite, no code saturates, and the repeated wave decodes as it did the first time (no drift)."""
    engine = make_engine(smollm2_bundle, kv_dtype="fp8", enable_prefix_caching=False)
    for layer in engine.kv.layers:
        layer.calibrators[0] = Fp8Calibrator(layer.blocks.num_kv_heads, window=8)
    questions = [f"Describe object number {i} on the kitchen table." for i in range(8)]
    waves = [(PROMPTS, 16), (questions[:4], 16), (questions[4:], 16), (PROMPTS, 8)]
    outputs, scales = [], []
    for prompts, max_new in waves:
        ids = [engine.submit(r) for r in _greedy(prompts, max_new)]
        engine.step()
        assert _saturated_codes(engine) == 0
        done = {}
        while engine.has_unfinished:
            done.update({o.request_id: o.token_ids for o in engine.step()})
        outputs.append([done[i] for i in ids])
        scales.append(torch.stack([torch.stack([lay.blocks.k_scale, lay.blocks.v_scale]) for lay in engine.kv.layers]))
    assert all(bool(torch.isfinite(s).all() and (s > 0).all()) for s in scales)
    for later in scales[1:]:
        torch.testing.assert_close(later, scales[0], rtol=0, atol=0)
    assert outputs[-1] == [tokens[:8] for tokens in outputs[0]]


def test_unknown_kv_dtype_is_rejected(tiny_bundle):
    with pytest.raises(EngineError) as err:
        make_engine(tiny_bundle, kv_dtype="int4")
    assert err.value.code == ErrorCode.INVALID_ARGUMENT
    assert "int4" in err.value.message and "fp8" in err.value.message and "int8" in err.value.message


@pytest.mark.parametrize("layers", [[2], [-1], [0, 7]])
def test_full_precision_layer_out_of_range_is_rejected(tiny_bundle, layers):
    with pytest.raises(EngineError) as err:
        make_engine(tiny_bundle, kv_dtype="int8", kv_full_precision_layers=layers)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT
    assert "kv_full_precision_layers" in err.value.message and "0..1" in err.value.message


def test_full_precision_layers_stay_in_the_compute_dtype(tiny_bundle):
    engine = make_engine(tiny_bundle, kv_dtype="fp8", kv_full_precision_layers=[1])
    assert [layer.blocks.k.dtype for layer in engine.kv.layers] == [torch.float8_e4m3fn, torch.float32]
    assert engine.kv_dtype_name == "fp8(fp32:1)"
    assert engine.generate(_greedy(PROMPTS[:1], 4))[0].ok


STARTUP = """
import torch
from engine_helpers import TINY, make_engine
from oxygen_ros.errors import EngineError
from oxygen_ros.models.llama import LlamaModel
from oxygen_ros.models.registry import ModelBundle

bundle = ModelBundle(LlamaModel(TINY).eval(), None, "tiny", TINY.num_layers, TINY.num_kv_heads, TINY.head_dim, 4096)
try:
    make_engine(bundle, kv_dtype="fp8")
except EngineError as exc:
    print(exc)
"""


def test_fp8_where_its_kernels_cannot_run_is_rejected_at_startup():
    """Forcing the Triton kernels on CPU without the interpreter: the startup probe turns the failure into a clear
    FAILED_PRECONDITION (a fresh process, since an interpreter imported by other tests would make it work)."""
    test_dir = Path(__file__).parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["OXYGEN_KERNELS"] = "triton"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(test_dir), env.get("PYTHONPATH")]))
    if torch.cuda.is_available():
        env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run([sys.executable, "-c", STARTUP], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("FAILED_PRECONDITION: KV format fp8 cannot run here: fp8 KV kernels fail on cpu")
    assert "TRITON_INTERPRET=1" in out.stdout
