"""The pixel rows of a sensor_msgs/Image, every size checked against ``bounds`` before a byte is copied: one place for
the colour frames the models read (``convert``) and the depth images the navigation node stops for."""

import numpy as np
from sensor_msgs.msg import Image

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros import bounds


def image_rows(msg: Image, bytes_per_pixel: int, copy: tuple[str, int] | None = None) -> np.ndarray:
    """The image's data as [height, width * bytes_per_pixel] uint8 (row padding in ``step`` dropped, no copy);
    EngineError naming the field when a size is zero, past a bound, or inconsistent with the data. ``copy``: (what,
    bytes per pixel) of the copy the caller will make, bounded too."""
    height, width, step = msg.height, msg.width, msg.step
    if height == 0 or width == 0:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"zero-size image ({width}x{height})")
    bounds.at_most("image width", width, bounds.IMAGE_SIDE, "pixels")
    bounds.at_most("image height", height, bounds.IMAGE_SIDE, "pixels")
    row = width * bytes_per_pixel
    if step < row:
        message = f"image step {step} is shorter than a row of {width} {msg.encoding} pixels ({row} bytes)"
        raise EngineError(ErrorCode.INVALID_ARGUMENT, message)
    bounds.at_most("image data (step x height)", step * height, bounds.IMAGE_BYTES, "bytes")
    if copy is not None:
        what, size = copy
        bounds.at_most(f"image {what} (width x height x {size})", width * height * size, bounds.IMAGE_BYTES, "bytes")
    if len(msg.data) != step * height:
        message = f"image data has {len(msg.data)} bytes, {height} rows of {step} need {step * height}"
        raise EngineError(ErrorCode.INVALID_ARGUMENT, message)
    return np.frombuffer(msg.data, dtype=np.uint8).reshape(height, step)[:, :row]
