"""image_transport's compressed frames (sensor_msgs/CompressedImage on `<camera topic>/compressed`): what a camera
sends once per frame across a network to a remote inference node, a twentieth of the raw bytes or less.

A frame is bounded from its header before it is decoded (a decompression bomb is refused, never allocated), and it is
named by its compressed bytes, not its pixels: the robot's task nodes and a remote inference node decode with their
own libjpeg, whose pixels may differ in the last bit, yet must agree on the id a request names the frame by.
"""

import hashlib
import io
import warnings

import cv2
import numpy as np
from PIL import Image as PILImage
from sensor_msgs.msg import CompressedImage

from oxygen_ros import bounds
from oxygen_ros.engine.io import Observation
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes.stamps import nanoseconds

COMPRESSED_SUFFIX = "/compressed"  # image_transport's compressed topic
FORMATS = ("JPEG", "PNG")  # what image_transport's compressed plugin sends; OpenCV would decode many more
MAX_JPEG_SCANS = 100  # a baseline JPEG has 1, a progressive one ~10 (libjpeg's default script), plus a thumbnail's


def is_compressed(topic: str) -> bool:
    return topic.endswith(COMPRESSED_SUFFIX)


def _invalid(message: str) -> EngineError:
    return EngineError(ErrorCode.INVALID_ARGUMENT, message)


def compressed_to_rgb(msg: CompressedImage) -> np.ndarray:
    """HxWx3 uint8 RGB of a JPEG or PNG; its size, read from its header, bounded before it is decoded."""
    bounds.at_most("compressed image data", len(msg.data), bounds.IMAGE_BYTES, "bytes")
    if "compressedDepth" in msg.format:
        bounds.text("compressed image format", msg.format, bounds.ID_CHARS)
        raise _invalid(f"compressed image format {msg.format!r} is a depth image, not a colour one")
    data = np.frombuffer(msg.data, dtype=np.uint8)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)  # the bounds below refuse it
            with PILImage.open(io.BytesIO(data), formats=FORMATS) as header:
                (width, height), kind = header.size, header.format
    except PILImage.DecompressionBombError as exc:  # over twice Pillow's pixel limit: far over ours
        raise EngineError(ErrorCode.OUT_OF_RANGE, f"compressed image size: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise _invalid(f"compressed image is not a {' or '.join(FORMATS)} image Pillow can read: {exc}") from exc
    if width == 0 or height == 0:
        raise _invalid(f"zero-size compressed image ({width}x{height})")
    bounds.at_most("compressed image width", width, bounds.IMAGE_SIDE, "pixels")
    bounds.at_most("compressed image height", height, bounds.IMAGE_SIDE, "pixels")
    bounds.at_most("compressed image RGB copy (width x height x 3)", width * height * 3, bounds.IMAGE_BYTES, "bytes")
    # each scan of a progressive JPEG is a pass over every block: thousands of near-empty ones in a few MB would hold
    # a decoding thread for minutes (libjpeg sets no scan limit through OpenCV). An SOS marker cannot appear inside
    # entropy-coded data (0xFF is stuffed there); an EXIF thumbnail or metadata adds a few.
    if kind in ("JPEG", "MPO"):  # (Pillow names a JPEG with an MPF segment MPO: its first image is a JPEG)
        scans = data.tobytes().count(b"\xff\xda")
        bounds.at_most("compressed image scans (JPEG SOS markers)", scans, MAX_JPEG_SCANS, "scans")
    bgr = cv2.imdecode(data, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    if bgr is None or bgr.shape != (height, width, 3):
        raise _invalid(f"compressed image ({width}x{height}) could not be decoded")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def compressed_id(msg: CompressedImage) -> str:
    """'cmp-' + 16 hex digits of a hash over the format and the compressed bytes."""
    bounds.at_most("compressed image data", len(msg.data), bounds.IMAGE_BYTES, "bytes")
    bounds.text("compressed image format", msg.format, bounds.ID_CHARS)
    digest = hashlib.sha256(msg.format.encode() + b"|" + bytes(msg.data)).hexdigest()[:16]
    return f"cmp-{digest}"


def compressed_observation(msg: CompressedImage) -> Observation:
    """One compressed camera frame as an observation named by its bytes, with its capture stamp."""
    return Observation(observation_id=compressed_id(msg), images=[compressed_to_rgb(msg)],
                       stamp_ns=nanoseconds(msg.header.stamp))  # fmt: skip
