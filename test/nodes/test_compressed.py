"""A compressed camera frame is bounded before it is decoded: a JPEG or PNG only (OpenCV would decode many more
formats), its pixels from its header (a decompression bomb is refused OUT_OF_RANGE, never allocated), and a JPEG's
scans (each is a pass over every block: thousands of near-empty ones would hold a decoding thread for minutes)."""

import io
import struct
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage
from sensor_msgs.msg import CompressedImage

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes.compressed import MAX_JPEG_SCANS, compressed_to_rgb


def _message(data: bytes, fmt: str) -> CompressedImage:
    return CompressedImage(format=fmt, data=data)


def _encoded(ext: str, image: np.ndarray, *params: int) -> bytes:
    ok, encoded = cv2.imencode(ext, image, list(params))
    assert ok
    return encoded.tobytes()


def _refusal(data: bytes, fmt: str = "jpeg") -> EngineError:
    with pytest.raises(EngineError) as err:
        compressed_to_rgb(_message(data, fmt))
    return err.value


def test_a_progressive_jpeg_and_a_png_whose_data_holds_the_sos_bytes_decode():
    image = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    progressive = _encoded(".jpg", image, cv2.IMWRITE_JPEG_PROGRESSIVE, 1)
    assert 2 < progressive.count(b"\xff\xda") <= MAX_JPEG_SCANS  # libjpeg's default script: ~10 scans
    assert compressed_to_rgb(_message(progressive, "rgb8; jpeg compressed bgr8")).shape == (480, 640, 3)
    noise = np.random.default_rng(1).integers(0, 256, (2048, 2048, 3), dtype=np.uint8)
    png = _encoded(".png", noise, cv2.IMWRITE_PNG_COMPRESSION, 1)
    assert png.count(b"\xff\xda") > MAX_JPEG_SCANS  # by chance in deflate's bytes: not scans, not counted
    np.testing.assert_array_equal(compressed_to_rgb(_message(png, "rgb8; png compressed bgr8")), noise[..., ::-1])


def _mpo() -> bytes:
    """A JPEG with an MPF segment (two images: a stereo camera's), which Pillow names MPO, not JPEG."""
    out = io.BytesIO()
    first, second = (PILImage.new("RGB", (64, 64), colour) for colour in ("red", "blue"))
    first.save(out, "MPO", save_all=True, append_images=[second])
    return out.getvalue()


@pytest.mark.parametrize("kind", ["jpeg", "mpo"])
def test_a_jpeg_with_more_scan_markers_than_the_bound_is_refused_before_decoding(kind):
    image = _encoded(".jpg", np.zeros((64, 64, 3), dtype=np.uint8)) if kind == "jpeg" else _mpo()
    with PILImage.open(io.BytesIO(image)) as opened:
        assert opened.format == kind.upper()
    # SOS markers after the image's own (a scan bomb's are real scans; the count is taken before any decoding)
    bomb = image[:-2] + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" * (MAX_JPEG_SCANS + 1) + b"\xff\xd9"
    err = _refusal(bomb)
    assert err.code == ErrorCode.OUT_OF_RANGE and "compressed image scans (JPEG SOS markers)" in err.message


def test_a_format_other_than_jpeg_or_png_is_refused_naming_them():
    bmp = _encoded(".bmp", np.zeros((8, 8, 3), dtype=np.uint8))
    assert cv2.imdecode(np.frombuffer(bmp, np.uint8), cv2.IMREAD_COLOR) is not None  # OpenCV alone would decode it
    err = _refusal(bmp, "bmp")
    assert err.code == ErrorCode.INVALID_ARGUMENT and "JPEG or PNG" in err.message


def test_a_png_header_claiming_a_decompression_bomb_is_out_of_range():
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0))  # 900 M pixels, RGB
    bomb = b"\x89PNG\r\n\x1a\n" + header + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")
    err = _refusal(bomb, "png")
    assert err.code == ErrorCode.OUT_OF_RANGE and "compressed image size" in err.message
