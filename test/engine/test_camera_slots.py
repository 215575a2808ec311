"""A robot's camera keys put into a checkpoint's camera slots, as LeRobot's policy orders its image features."""

import numpy as np
import pytest

from oxygen_ros.engine.camera_slots import slot_images
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.common.lerobot_config import camera_keys

CHECKPOINT = ("observation.images.base_0_rgb", "observation.images.left_wrist_0_rgb",
              "observation.images.right_wrist_0_rgb")  # fmt: skip
A, B = np.zeros((2, 2, 3), np.uint8), np.ones((2, 2, 3), np.uint8)


def test_keyed_images_go_to_their_slots_and_missing_cameras_stay_empty():
    slots = slot_images([A, B], ["right_wrist_0_rgb", "observation.images.base_0_rgb"], CHECKPOINT)
    assert slots[0] is B and slots[1] is None and slots[2] is A


def test_images_without_keys_or_a_model_without_camera_names_keep_their_order():
    assert slot_images([A, B], [], CHECKPOINT) == [A, B]
    assert slot_images([A, B], ["top", "wrist"], ()) == [A, B]


@pytest.mark.parametrize(("keys", "phrase"), [
    (["base_0_rgb", "gripper"], "image_keys[1] 'gripper' is not a camera of this checkpoint"),
    (["base_0_rgb", "observation.images.base_0_rgb"], "a second image for camera observation.images.base_0_rgb"),
])  # fmt: skip
def test_an_unknown_or_repeated_camera_is_refused_naming_the_key(keys, phrase):
    with pytest.raises(EngineError) as err:
        slot_images([A, B], keys, CHECKPOINT)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and phrase in err.value.message


def test_the_checkpoint_order_is_its_visual_features_then_its_empty_cameras():
    config = {"input_features": {"observation.state": {"type": "STATE"},
                                 "observation.images.top": {"type": "VISUAL"},
                                 "observation.images.wrist": {"type": "VISUAL"}},
              "empty_cameras": 1}  # fmt: skip
    assert camera_keys(config) == ("observation.images.top", "observation.images.wrist",
                                   "observation.images.empty_camera_0")  # fmt: skip
