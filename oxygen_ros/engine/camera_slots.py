"""An observation's images put into the camera slots of a checkpoint that names them (a LeRobot policy's image keys).

A robot publishes its cameras under its own names; a pi0 / pi0.5 checkpoint reads them in the order of its
``image_features`` (e.g. ``observation.images.base_0_rgb``, ``...left_wrist_0_rgb``). Each image that carries a key
goes to the slot of that key (the key as the checkpoint writes it, or without its ``observation.images.`` prefix); a
slot with no image is a missing camera, which the policy masks (LeRobot pads it as an empty camera). Images without
keys keep the order they came in.
"""

from collections.abc import Sequence

import numpy as np

from oxygen_ros.errors import EngineError, ErrorCode

IMAGE_PREFIX = "observation.images."  # LeRobot's OBS_IMAGES + "."


def slot_images(images: Sequence[np.ndarray], image_keys: Sequence[str],
                camera_keys: Sequence[str]) -> list[np.ndarray | None]:  # fmt: skip
    """One entry per camera slot of ``camera_keys`` (None = no image for it), or ``images`` as they are when either
    side names no cameras. INVALID_ARGUMENT naming the key for a camera the checkpoint does not read, or two images
    for one camera."""
    if not image_keys or not camera_keys:
        return list(images)
    slots: list[np.ndarray | None] = [None] * len(camera_keys)
    index = {key: i for i, key in enumerate(camera_keys)}
    for i, (image, key) in enumerate(zip(images, image_keys, strict=True)):
        slot = index.get(key, index.get(IMAGE_PREFIX + key))
        if slot is None:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"image_keys[{i}] {key!r} is not a camera of this "
                              f"checkpoint, which reads {', '.join(camera_keys)}")  # fmt: skip
        if slots[slot] is not None:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"image_keys[{i}] {key!r}: a second image for camera "
                              f"{camera_keys[slot]}")  # fmt: skip
        slots[slot] = image
    return slots
