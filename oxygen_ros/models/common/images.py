"""Camera images -> what SigLIP consumes (pi0, pi0.5 and Idefics3's content hashes), with strict validation at the
engine's edge.

Images follow openpi's ``resize_with_pad``: the aspect ratio is kept, the image is scaled to fit 224x224 and centred on
a black canvas (distorting the scene would change what the policy sees).  OpenCV does the scaling: ``INTER_AREA`` when
shrinking (anti-aliased, the closest OpenCV match to PIL's bilinear-with-antialias that openpi uses) and
``INTER_LINEAR`` when enlarging.  Pixels are then mapped to [-1, 1] (SigLIP/PaliGemma's mean 0.5, std 0.5).
"""

import hashlib
from collections.abc import Sequence

import cv2
import numpy as np
import torch

FLOAT_DTYPES = (np.float32, np.float64)


def image_content_hash(image: np.ndarray) -> str:
    """sha256 of shape, dtype and pixels: the prefix cache's extra key, so that two different images behind identical
    placeholder tokens never share KV blocks."""
    h = hashlib.sha256(f"{image.shape}|{image.dtype.str}|".encode())
    h.update(np.ascontiguousarray(image).tobytes())
    return h.hexdigest()


def validate_image(image: object, index: int = 0) -> np.ndarray:
    """Return ``image`` if it is an HxWx3 RGB array: uint8 in [0, 255] or float32/64 in [0, 1]; else ValueError."""
    where = f"image {index}"
    if not isinstance(image, np.ndarray):  # ValueError like every other bad input: the engine maps it to one code
        raise ValueError(  # noqa: TRY004
            f"{where}: expected a numpy array, got {type(image).__name__}"
        )
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"{where}: expected shape HxWx3 (RGB), got {image.shape}")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"{where}: image is empty, shape {image.shape}")
    if image.dtype == np.uint8:
        return image
    if image.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{where}: dtype {image.dtype} not supported, use uint8 [0, 255] or float32/float64 [0, 1]")
    if not np.isfinite(image).all():
        raise ValueError(f"{where}: contains NaN or infinite values")
    if image.min() < 0.0 or image.max() > 1.0:
        raise ValueError(f"{where}: float pixels must lie in [0, 1], got [{image.min()}, {image.max()}]")
    return image


def resize_with_pad(image: np.ndarray, size: int) -> np.ndarray:
    """Fit ``image`` inside size x size keeping its aspect ratio, centred, padded with 0 (black)."""
    h, w = image.shape[:2]
    if (h, w) == (size, size):
        return image
    ratio = max(h / size, w / size)
    new_h, new_w = max(1, int(h / ratio)), max(1, int(w / ratio))
    interpolation = cv2.INTER_AREA if ratio > 1.0 else cv2.INTER_LINEAR
    resized = cv2.resize(image, (new_w, new_h), interpolation=interpolation)
    canvas = np.zeros((size, size, 3), dtype=image.dtype)
    top, left = (size - new_h) // 2, (size - new_w) // 2
    canvas[top : top + new_h, left : left + new_w] = resized
    return canvas


def preprocess_images(images: Sequence[np.ndarray], size: int = 224, max_images: int = 3) -> torch.Tensor:
    """Validate, resize and normalise: list of HxWx3 RGB arrays -> float32 [N, 3, size, size] in [-1, 1]."""
    if len(images) > max_images:
        raise ValueError(f"at most {max_images} images per observation, got {len(images)}")
    out = torch.empty(len(images), 3, size, size, dtype=torch.float32)
    for i, image in enumerate(images):
        image = validate_image(image, i)
        if image.dtype != np.uint8:
            image = image.astype(np.float32)  # the model computes in fp32; one float path through OpenCV
        pixels = torch.from_numpy(resize_with_pad(image, size).astype(np.float32))
        scale = 2.0 / 255.0 if image.dtype == np.uint8 else 2.0
        out[i] = (pixels * scale - 1.0).permute(2, 0, 1)
    return out
