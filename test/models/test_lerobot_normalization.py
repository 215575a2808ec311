"""LeRobot's state / action normalization read from a policy folder's processor files, against LeRobot's formulas as
``lerobot/processor/normalize_processor.py`` (``_NormalizationMixin._apply_transform``) writes them, in every mode a
pi0 / pi0.5 config can name; missing files are identity with a logged note; bad files are refused naming them."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from pi05_folders import TINY, write_processor_files

from oxygen_ros.models.common.normalization import read_normalizer
from oxygen_ros.models.pi05 import Pi05Model

EPS = 1e-8  # LeRobot's default
STATE = {"mean": [0.5, -1.0, 2.0], "std": [2.0, 0.5, 0.0], "min": [-1.0, -2.0, 1.0], "max": [1.0, 0.0, 1.0],
         "q01": [-0.9, -1.8, 1.5], "q99": [0.9, 0.2, 1.5], "q10": [-0.5, -1.5, 0.0], "q90": [0.5, -0.5, 4.0]}  # fmt: skip
ACTION = {k: v[:2] for k, v in STATE.items()}  # the third dim of each stat has a zero spread: the eps branches


def lerobot(x: torch.Tensor, mode: str, stats: dict, inverse: bool) -> torch.Tensor:
    """``_apply_transform`` transcribed: mode by mode, the denominators and their eps exactly as LeRobot has them."""
    s = {k: torch.tensor(v, dtype=torch.float32) for k, v in stats.items()}
    if mode == "MEAN_STD":
        return x * s["std"] + s["mean"] if inverse else (x - s["mean"]) / (s["std"] + EPS)
    low, high = {"MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}[mode]
    denom = s[high] - s[low]
    denom = torch.where(denom == 0, torch.tensor(EPS, dtype=x.dtype), denom)
    if mode == "MIN_MAX":
        return (x + 1) / 2 * denom + s[low] if inverse else 2 * (x - s[low]) / denom - 1
    return (x + 1.0) * denom / 2.0 + s[low] if inverse else 2.0 * (x - s[low]) / denom - 1.0


@pytest.mark.parametrize("mode", ["MEAN_STD", "MIN_MAX", "QUANTILES", "QUANTILE10"])
def test_state_in_and_actions_out_follow_lerobots_formulas(tmp_path: Path, mode: str) -> None:
    write_processor_files(tmp_path, mode, STATE, ACTION)
    normalizer = read_normalizer(tmp_path)
    state = np.array([0.3, -1.7, 1.5])
    expected = lerobot(torch.tensor(state, dtype=torch.float32), mode, STATE, inverse=False)
    torch.testing.assert_close(torch.from_numpy(normalizer.normalize_state(state)), expected, atol=0, rtol=0)
    chunk = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(0))
    expected = lerobot(chunk, mode, ACTION, inverse=True)
    torch.testing.assert_close(normalizer.unnormalize_actions(chunk), expected, atol=0, rtol=0)
    assert not torch.equal(expected, chunk)
    with pytest.raises(ValueError, match="state has 2 values, the checkpoint's normalization stats have 3"):
        normalizer.normalize_state(np.array([0.1, 0.2]))


def test_missing_files_are_identity_with_a_note(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="oxygen_ros.models.common.normalization"):
        normalizer = read_normalizer(tmp_path)
    assert "policy_preprocessor.json is missing" in caplog.text and "policy_postprocessor.json is missing" in caplog.text
    state, chunk = np.array([0.25, -3.0]), torch.randn(2, 5, 7)
    np.testing.assert_array_equal(normalizer.normalize_state(state), state.astype(np.float32))
    assert torch.equal(normalizer.unnormalize_actions(chunk), chunk)


def test_identity_mode_and_stats_absent_pass_through(tmp_path: Path) -> None:
    """norm_map IDENTITY, or a state file without the key's stats: unchanged, as LeRobot returns it."""
    write_processor_files(tmp_path, "IDENTITY", STATE, ACTION)
    assert read_normalizer(tmp_path).normalize_state(np.array([5.0, 6.0, 7.0])).tolist() == [5.0, 6.0, 7.0]
    write_processor_files(tmp_path, "QUANTILES", STATE, ACTION)
    config = json.loads((tmp_path / "policy_postprocessor.json").read_text())
    config["steps"][0]["config"]["features"] = {"observation.state": {"type": "STATE", "shape": [3]}}
    (tmp_path / "policy_postprocessor.json").write_text(json.dumps(config))
    chunk = torch.randn(1, 5, 2)
    assert torch.equal(read_normalizer(tmp_path).unnormalize_actions(chunk), chunk)


@pytest.mark.parametrize(("damage", "phrase"), [
    (lambda d: (d / "policy_preprocessor_step_3_normalizer_processor.safetensors").unlink(), "is missing from"),
    (lambda d: (d / "policy_preprocessor.json").write_text("{"), "not valid JSON"),
    (lambda d: _set_mode(d, "ZSCORE"), "mode 'ZSCORE'"),
    (lambda d: _set_mode(d, "MEAN_STD"), "MEAN_STD of observation.state needs 1-D stats ['mean', 'std']"),
], ids=["state file", "json", "mode", "stats for the mode"])  # fmt: skip
def test_bad_files_are_refused_naming_them(tmp_path: Path, damage, phrase: str) -> None:
    write_processor_files(tmp_path, "QUANTILES", {k: STATE[k] for k in ("q01", "q99")}, ACTION)
    damage(tmp_path)
    with pytest.raises(ValueError, match="policy_preprocessor") as err:
        read_normalizer(tmp_path)
    assert phrase in str(err.value), str(err.value)


def _set_mode(folder: Path, mode: str) -> None:
    config = json.loads((folder / "policy_preprocessor.json").read_text())
    config["steps"][-1]["config"]["norm_map"]["STATE"] = mode
    (folder / "policy_preprocessor.json").write_text(json.dumps(config))


def test_action_stats_must_fit_the_robots_chunk(tmp_path: Path) -> None:
    """Stats of 2 action dims for a checkpoint whose chunk has 7: refused at load, not when the first chunk comes."""
    write_processor_files(tmp_path, "QUANTILES", STATE, ACTION)
    model = Pi05Model(TINY)
    with pytest.raises(ValueError, match="action normalization stats have 2 dims, the checkpoint's chunk 7"):
        model.set_normalizer(read_normalizer(tmp_path))
