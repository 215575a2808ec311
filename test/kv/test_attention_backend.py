"""The paths a pool runs are chosen once from ``EngineConfig`` (and an environment override for measurements), and a
step's context carries them: switching a path off in the config reaches every step without any layer reading the
environment."""

import pytest
import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.kernels import cpu_library
from oxygen_ros.kv.attention_backend import OVERRIDES, choose_backend
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.layers.attention import paged_attention

CPU = torch.device("cpu")
TABLE = [3, 1, 4]


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch):
    for name in OVERRIDES.values():
        monkeypatch.delenv(name, raising=False)
    yield
    cpu_library.enable(True)  # what a fresh process starts with


def _pool(config: EngineConfig) -> KVCache:
    return KVCache(KVLayout(2, 2, 16, 16, torch.float32), 8, CPU, choose_backend(config, CPU))


def test_auto_runs_torchs_kv_kernels_on_a_cpu():
    assert choose_backend(EngineConfig(), CPU).kernels == "torch"
    assert choose_backend(EngineConfig(kernel_backend="torch"), CPU).kernels == "torch"


def test_config_switches_reach_the_step_context():
    on = choose_backend(EngineConfig(), CPU)
    if not on.c_kernels or cpu_library.library() is None:
        pytest.skip("the C kernels do not run here (no AVX-512 / AVX2 / NEON, or no cc): nothing to switch off")
    assert on.c_paged_decode and on.decode_row
    assert _pool(EngineConfig()).steps.batch([TABLE], [40], [1], [0])[0].row_decode
    row_off = _pool(EngineConfig(cpu_decode_row=False))
    ctx, _ = row_off.steps.batch([TABLE], [40], [1], [0])
    assert not ctx.row_decode and ctx.prefix_groups is not None  # still the C paged decode
    in_place_off = _pool(EngineConfig(cpu_paged_decode=False))
    ctx, _ = in_place_off.steps.batch([TABLE], [40], [1], [0])
    assert not in_place_off.decodes_in_place and ctx.cascade is not None and ctx.prefix_groups is None
    off = choose_backend(EngineConfig(cpu_kernels=False), CPU)
    assert not (off.c_kernels or off.c_paged_decode or off.decode_row)
    assert cpu_library.library() is None  # the packed products fall back to torch's too


def test_the_c_kernel_decodes_int8_pools_but_prefills_over_fp32_only():
    """Decode attention reads an int8 pool in place; a short prefill chunk's tokens as rows would read the chunk's own
    keys back quantized (under scales its later tokens set), so int8 prefill keeps torch's attention."""
    backend = choose_backend(EngineConfig(), CPU)
    if not backend.c_paged_decode or cpu_library.library() is None:
        pytest.skip("the C kernels do not run here (no AVX-512 / AVX2 / NEON, or no cc)")
    fp32, int8 = (KVCache(KVLayout(2, 2, 16, 16, dtype), 8, CPU, backend) for dtype in (torch.float32, torch.int8))
    assert fp32.decodes_in_place and fp32.prefills_in_place
    assert int8.decodes_in_place and not int8.prefills_in_place
    ctx, _ = int8.steps.batch([TABLE, [5]], [40, 9], [1, 1], [0, 0])
    assert ctx.prefix_groups is not None and ctx.cascade is None  # the C kernel's step
    one_layer_fp32 = KVCache(KVLayout(2, 2, 16, 16, torch.int8, full_precision_layers=(0,)), 8, CPU, backend)
    assert one_layer_fp32.decodes_in_place and not one_layer_fp32.prefills_in_place


@pytest.mark.parametrize("field", ["cpu_kernels", "cpu_paged_decode", "cpu_decode_row"])
def test_an_environment_override_turns_a_path_off(monkeypatch, field):
    monkeypatch.setenv(OVERRIDES[field], "0")
    backend = choose_backend(EngineConfig(), CPU)
    assert backend.c_kernels == (field != "cpu_kernels")
    assert backend.c_paged_decode == (field == "cpu_decode_row")
    assert backend.decode_row == (field == "cpu_paged_decode")  # the one-call decoder reads the pool itself


def test_contexts_are_planned_once_and_layers_refuse_unplanned_ones():
    kv = _pool(EngineConfig())
    ctx, _ = kv.steps.batch([TABLE], [0], [20], [0])
    assert ctx.planned and kv.steps.plan(ctx) is ctx
    raw = StepContext(ctx.slot_mapping, [20], [20], ctx.block_tables)
    q, k = torch.zeros(20, 2, 16), torch.zeros(20, 2, 16)
    with pytest.raises(AssertionError, match="kv.steps"):
        paged_attention(q, k, k, raw, kv.layers[0], 0.25)
