"""Model presets (config/models/<name>.yaml): installed with the package, each a valid set of inference-node
parameters, and a wrong one refused before any node starts with the preset, its file and the field named."""

import sys
from pathlib import Path

import pytest
import yaml

from oxygen_ros.config import EngineConfig
from oxygen_ros.nodes import params, presets

SOURCE = Path(__file__).parents[2] / "config" / "models"
INSTALLED = Path(sys.prefix) / "share" / "oxygen_ros" / "config" / "models"
CONFIG = Path(sys.prefix) / "share" / "oxygen_ros" / "config" / "oxygen.yaml"
VALID = {"model": "smollm2-135m", "block_size": 16}


def test_every_preset_is_installed_as_in_the_source():
    assert presets.names() == presets.names(SOURCE)
    for name in presets.names(SOURCE):
        assert (INSTALLED / f"{name}.yaml").read_text() == (SOURCE / f"{name}.yaml").read_text(), name


def test_the_offline_default_pi05_tiny_and_smolvlm_are_there():
    assert {"smollm2-135m", "pi05-causal-tiny", "smolvlm-256m-instruct"} <= set(presets.names())
    default_model = yaml.safe_load(CONFIG.read_text())["oxygen_inference"]["ros__parameters"]["model"]
    assert presets.load("smollm2-135m")["model"] == default_model == EngineConfig().model
    assert presets.load("pi05-causal-tiny")["model"] == "pi05-causal-tiny"
    assert presets.load("smolvlm-256m-instruct")["model"] == "~/models/SmolVLM-256M-Instruct"  # what README downloads


def test_every_preset_is_typed_parameters_the_node_accepts():
    for name in presets.names():
        values = presets.load(name)
        assert set(values) <= set(presets.KEYS) and values["model"], name
        params.parse(params.defaults() | values)


def _write(folder: Path, text: str) -> Path:
    (folder / "mine.yaml").write_text(text)
    return folder


def test_an_unknown_preset_names_itself_the_folder_and_the_presets_there(tmp_path):
    _write(tmp_path, "model: smollm2-135m\n")
    for name in ("nope", "../models/mine", ".hidden", ""):
        with pytest.raises(ValueError) as raised:
            presets.load(name, tmp_path)
        assert f"unknown model preset {name!r}" in str(raised.value) and str(tmp_path) in str(raised.value)
        assert "presets there: mine" in str(raised.value)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("model: smollm2-135m\nblock_size: 12\n", "block_size must be a power of two"),
        ("model: smollm2-135m\nblock_size: '16'\n", "block_size must be int"),
        ("model: smollm2-135m\nblock_size: true\n", "block_size must be int"),
        ("model: smollm2-135m\nmax_model_len: 0\n", "max_model_len must be in [1, 1048576], got 0"),
        ("model: smollm2-135m\nmax_model_len: 100000000000000000000\n", "max_model_len must fit a 64-bit"),
        ("model: smollm2-135m\nseed: -100000000000000000000\n", "seed must fit a 64-bit"),
        ("model: smollm2-135m\nkv_cache_bytes: -1\n", "kv_cache_bytes must be in [0, "),
        ("model: smollm2-135m\nkv_cache_memory_fraction: 1.5\n", "kv_cache_memory_fraction must be in (0, 1]"),
        ("model: smollm2-135m\nkv_cache_memory_fraction: .nan\n", "kv_cache_memory_fraction must be a finite"),
        ("model: smollm2-135m\ndtype: float64\n", "dtype must be auto, float32, float16 or bfloat16, got 'float64'"),
        ("model: smollm2-135m\nkv_dtype: int3\n", "kv_dtype must be auto or a KV storage format"),
        ("model: smollm2-135m\nnum_denoise_steps: 2.5\n", "num_denoise_steps must be int"),
        ("model: smollm2-135m\ncamera_topic: /cam\n", "['camera_topic'] cannot be set by a preset"),
        ("model: smollm2-135m\ntemperature: .nan\n", "temperature must be a finite"),
        ("model: smollm2-135m\ntemperature: -0.5\n", "temperature must be 0 (greedy) or in [0.01, 100]"),
        ("model: smollm2-135m\ntemperature: 1000.0\n", "temperature must be 0 (greedy) or in [0.01, 100], got 1000.0"),
        ("model: smollm2-135m\ntop_p: 0.0\n", "top_p must be in (0, 1]"),
        ("model: smollm2-135m\ntop_k: -1\n", "top_k must be >= 0"),
        ("model: smollm2-135m\ntop_k: 0.5\n", "top_k must be int"),
        ("model: smollm2-135m\nmin_p: 1.0\n", "min_p must be in [0, 1)"),
        ("model: smollm2-135m\nrepetition_penalty: 0\n", "repetition_penalty must be in [0.01, 100]"),
        ("model: smollm2-135m\nseed: -1\n", "seed must be in [0, "),
        ("block_size: 16\n", "model must name a model"),
        ("model: ''\n", "model must name a model"),
        ("- model\n", "expected a mapping of parameter: value"),
        ("model: [unclosed\n", "is not valid YAML"),
    ],
)
def test_a_wrong_value_is_refused_naming_the_preset_its_file_and_the_field(tmp_path, text, field):
    _write(tmp_path, text)
    with pytest.raises(ValueError) as raised:
        presets.load("mine", tmp_path)
    assert str(raised.value).startswith(f"model preset mine ({tmp_path / 'mine.yaml'})")
    assert field in str(raised.value)


def test_a_preset_carries_sampling_defaults_the_node_reads():
    sampled = presets.checked(VALID | {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
                                       "repetition_penalty": 1.1, "seed": 3}, "test")  # fmt: skip
    _, node = params.parse(params.defaults() | sampled)
    defaults = node.sampling_defaults()
    assert (defaults.temperature, defaults.top_p, defaults.top_k, defaults.min_p) == (0.7, 0.9, 40, 0.05)
    assert defaults.repetition_penalty == 1.1 and not defaults.greedy
    for name in presets.names():  # the shipped presets decode greedily unless a request asks otherwise
        _, node = params.parse(params.defaults() | presets.load(name))
        assert node.sampling_defaults().greedy, name


def test_ints_are_taken_for_floats():
    values = presets.checked(VALID | {"kv_cache_memory_fraction": 1}, "test")
    assert values["kv_cache_memory_fraction"] == 1.0 and isinstance(values["kv_cache_memory_fraction"], float)
