"""The node's parameters: one per EngineConfig field plus the node's own, each described, parsed with clear errors."""

import array
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from oxygen_ros.config import INT64_MAX, EngineConfig
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes import params
from oxygen_ros.nodes.inference_params import ROS_TYPES

CONFIG = Path(sys.prefix) / "share" / "oxygen_ros" / "config" / "oxygen.yaml"


def test_every_engine_field_and_node_setting_is_a_described_parameter():
    names = set(params.defaults())
    assert {f.name for f in fields(EngineConfig)} | {f.name for f in fields(params.NodeParams)} == names
    assert set(params.DESCRIPTIONS) == names


def test_defaults_parse_to_the_dataclass_defaults():
    engine_config, node_params = params.parse(params.defaults())
    assert (engine_config, node_params) == (EngineConfig(), params.NodeParams())


def test_shipped_config_names_only_declared_parameters():
    """A key the node does not declare is silently ignored by ROS: the YAML and the node must not drift."""
    shipped = yaml.safe_load(CONFIG.read_text())["oxygen_inference"]["ros__parameters"]
    assert set(shipped) <= set(params.defaults())
    engine_config, node_params = params.parse(params.defaults() | shipped)
    assert (engine_config.model, node_params.camera_topic) == (shipped["model"], shipped["camera_topic"])


def test_ints_are_accepted_for_floats_and_arrays_become_lists():
    values = params.defaults() | {"stats_rate_hz": 5, "kv_full_precision_layers": array.array("q", [0, 2]),
                                  "kv_task_dtypes": ("navigation=int8",)}  # fmt: skip
    engine_config, node_params = params.parse(values)
    assert node_params.stats_rate_hz == 5.0 and isinstance(node_params.stats_rate_hz, float)
    assert engine_config.kv_full_precision_layers == [0, 2]
    assert engine_config.kv_task_dtypes == ["navigation=int8"]


@pytest.mark.parametrize(
    ("name", "value", "phrase"),
    [
        ("block_size", "16", "block_size must be int"),
        ("eager_prefill", 1, "eager_prefill must be bool"),
        ("max_queue", 2.5, "max_queue must be int"),
        ("kv_full_precision_layers", [0.5], "kv_full_precision_layers must be"),
        ("kv_task_dtypes", [3], "kv_task_dtypes must be"),
        ("kv_task_dtypes", ["vqa:int8"], "kv_task_dtypes entry 'vqa:int8'"),
        ("block_size", 12, "power of two"),
        ("stats_rate_hz", 0.0, "stats_rate_hz must be in (0, 100], got 0.0"),
        ("action_period_s", float("nan"), "action_period_s must be in (0, 60], got nan"),
        ("observation_ring", 0, "observation_ring must be in [1, 10000], got 0"),
        ("observation_keep_s", -1.0, "observation_keep_s must be in [0, 3600], got -1.0"),
        ("observation_keep_s", float("inf"), "observation_keep_s must be in [0, 3600], got inf"),
        ("observation_ring_bytes", 0, "observation_ring_bytes must be in [1, 1099511627776], got 0"),
        ("max_prompt_chars", 0, "max_prompt_chars must be in [1, 16777216], got 0"),
        ("camera_topic", "", "camera_topic must not be empty"),
        ("pool_warn_fraction", 1.5, "pool_warn_fraction must be in (0, 1]"),
        ("temperature", float("inf"), "temperature must be 0 (greedy) or in [0.01, 100]"),
        ("top_p", 1.5, "top_p must be in (0, 1]"),
        ("top_k", -3, "top_k must be >= 0"),
        ("min_p", float("nan"), "min_p must be in [0, 1)"),
        ("repetition_penalty", -1.0, "repetition_penalty must be in [0.01, 100]"),
        ("max_num_seqs", 1 << 20, "max_num_seqs must be in [1, 4096]"),
        ("observation_keep_s", 1e9, "observation_keep_s must be in [0, 3600]"),
    ],
)
def test_bad_values_name_the_parameter(name, value, phrase):
    with pytest.raises(EngineError) as err:
        params.parse(params.defaults() | {name: value})
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and phrase in err.value.message


def test_every_number_has_a_range_that_holds_its_default_and_every_type_is_a_ros_type():
    numbers = {name for name, value in params.defaults().items() if type(value) in (int, float)}
    assert set(params.RANGES) == numbers
    for name, (low, high) in params.RANGES.items():
        assert low <= params.defaults()[name] <= high and high <= INT64_MAX, name
    assert set(params.types().values()) <= set(ROS_TYPES)
