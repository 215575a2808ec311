"""Which action dimensions a LeRobot checkpoint's relative actions cover, as its ``_build_mask`` decides."""

import numpy as np
import pytest

from oxygen_ros.models.common.relative_actions import RelativeActions


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
