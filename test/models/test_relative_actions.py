"""Which action dimensions a LeRobot checkpoint's relative actions cover, as its ``_build_mask`` decides."""

import json

import numpy as np
import pytest
import torch

from oxygen_ros.models.common.normalization import FeatureNorm, Normalizer
from oxygen_ros.models.common.relative_actions import RelativeActions, read_relative_actions


def test_excluded_joints_match_names_by_token_in_lower_case():
    relative = RelativeActions(exclude_joints=("gripper",), action_names=("arm.pos", "Left_Gripper.pos", "wrist.pos"))
    np.testing.assert_array_equal(relative.mask(3), [True, False, True])
    np.testing.assert_array_equal(relative.mask(5), [True, False, True, True, True])  # names shorter: the rest relative


def test_without_names_or_exclusions_every_dimension_is_relative():
    assert RelativeActions(exclude_joints=("gripper",)).mask(3).all()
    assert RelativeActions(action_names=("gripper.pos",)).mask(2).all()


def test_the_offset_is_the_state_on_relative_dims_and_a_short_state_is_refused():
    relative = RelativeActions(exclude_joints=("gripper",), action_names=("a", "b", "gripper"))
    np.testing.assert_array_equal(relative.offset(np.array([1.0, 2.0, 3.0, 4.0]), 3), [1.0, 2.0, 0.0])
    np.testing.assert_array_equal(relative.offset(np.array([1.0, 2.0]), 3), [1.0, 2.0, 0.0])  # the gripper needs none
    with pytest.raises(ValueError, match="3 relative action dims need as many state values, got 2"):
        RelativeActions().offset(np.array([1.0, 2.0]), 3)


def test_the_pipeline_order_says_which_state_is_added(tmp_path):
    """LeRobot's relative step caches the state it sees: the raw one before the normalizer, the normalized one
    after it (and that one is added); the absolute step disabled means absolute actions."""

    def write(pre: list[str], absolute: bool) -> None:
        steps = [{"registry_name": name, "config": {"enabled": True, "exclude_joints": ["gripper"],
                                                    "action_names": ["a", "gripper"]}} for name in pre]  # fmt: skip
        (tmp_path / "policy_preprocessor.json").write_text(json.dumps({"steps": steps}))
        post = [{"registry_name": "absolute_actions_processor", "config": {"enabled": absolute}}]
        (tmp_path / "policy_postprocessor.json").write_text(json.dumps({"steps": post}))

    write(["relative_actions_processor", "normalizer_processor"], absolute=True)
    assert read_relative_actions(tmp_path) == RelativeActions(("gripper",), ("a", "gripper"), normalized_state=False)
    write(["normalizer_processor", "relative_actions_processor"], absolute=True)
    relative = read_relative_actions(tmp_path)
    assert relative.normalized_state
    state = FeatureNorm("MEAN_STD", {"mean": torch.tensor([1.0, 0.0]), "std": torch.tensor([2.0, 1.0])})
    offset = Normalizer(state=state, relative=relative).action_offset(np.array([5.0, 0.3]), 2)
    np.testing.assert_allclose(offset, [2.0, 0.0], rtol=1e-6)  # (5 - 1) / 2 on the arm joint, none on the gripper
    write(["relative_actions_processor", "normalizer_processor"], absolute=False)
    assert read_relative_actions(tmp_path) is None
    write(["normalizer_processor"], absolute=True)
    with pytest.raises(ValueError, match="absolute_actions_processor is enabled but"):
        read_relative_actions(tmp_path)
