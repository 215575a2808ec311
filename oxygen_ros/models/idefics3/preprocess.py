"""Camera frames -> the tiles an Idefics3 vision encoder sees, equal to transformers' Idefics3ImageProcessor (PIL).

transformers resizes with PIL (LANCZOS by default) on uint8 images, three times at most: the longest edge to
``size.longest_edge`` (the short edge rounded up to even), then up to whole multiples of the tile size, then, for the
global image, down to one tile.  The same PIL calls in the same order give the same bytes; OpenCV's Lanczos is a
fixed 8x8 kernel without PIL's antialiasing and differs by tens of grey levels when shrinking, so PIL it is (Pillow
comes with matplotlib, a runtime dependency).  Rescale (float64, then float32) and normalise (float32) follow
transformers' numpy code operation for operation, so pixel values are bit-equal.
"""

import math
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image

from oxygen_ros.models.idefics3.config import MAX_IMAGE_SIDE, ImageProcessing


class Tiles(NamedTuple):
    """One image as the encoder sees it: the grid's tiles row by row, then the global image."""

    pixels: torch.Tensor  # [rows * cols + 1, 3, S, S] float32 (or [1, 3, S, S] when not split)
    rows: int  # 0 and 0 when the image is one tile (no grid)
    cols: int


def _rescale_to_max_len(height: int, width: int, max_len: int) -> tuple[int, int]:
    """transformers' _resize_output_size_rescale_to_max_len: longest edge to max_len, the other even."""
    aspect_ratio = width / height
    if width >= height:
        width = max_len
        height = int(width / aspect_ratio)
        height += height % 2
    else:
        height = max_len
        width = int(height * aspect_ratio)
        width += width % 2
    return max(height, 1), max(width, 1)


def _scale_below(height: int, width: int, max_len: int) -> tuple[int, int]:
    """transformers' _resize_output_size_scale_below_upper_bound."""
    aspect_ratio = width / height
    if width >= height and width > max_len:
        width = max_len
        height = int(width / aspect_ratio)
    elif height > width and height > max_len:
        height = max_len
        width = int(height * aspect_ratio)
    return max(height, 1), max(width, 1)


def _multiple_of_tile(height: int, width: int, tile: int) -> tuple[int, int]:
    """transformers' resize_for_vision_encoder size: both sides up to whole tiles, the aspect ratio kept."""
    aspect_ratio = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / aspect_ratio) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * aspect_ratio) / tile) * tile
    return height, width


def _normalised(tile: Image.Image, p: ImageProcessing) -> np.ndarray:
    """HWC uint8 tile -> CHW float32, as transformers' rescale (float64 multiply, float32 cast) then normalize."""
    pixels = np.moveaxis(np.asarray(tile), -1, 0)
    pixels = (pixels.astype(np.float64) * p.rescale_factor).astype(np.float32) if p.rescale_factor is not None \
        else pixels.astype(np.float32)  # fmt: skip
    if p.mean is not None:
        mean, std = np.array(p.mean, dtype=np.float32), np.array(p.std, dtype=np.float32)
        pixels = (pixels - mean[:, None, None]) / std[:, None, None]
    return pixels


def preprocess_image(image: np.ndarray, p: ImageProcessing) -> Tiles:
    """HxWx3 uint8 RGB (validated by the caller) -> its tiles, as transformers' processor computes them."""
    picture = Image.fromarray(image, mode="RGB")

    def resize(height: int, width: int) -> Image.Image:
        return picture.resize((width, height), resample=p.resample)

    if p.longest_edge is not None:
        height, width = _scale_below(*_rescale_to_max_len(image.shape[0], image.shape[1], p.longest_edge), MAX_IMAGE_SIDE)
        picture = resize(height, width)
    tile, rows, cols = p.tile_size, 0, 0
    if not p.split:
        tiles = [resize(tile, tile)]
    else:
        picture = resize(*_multiple_of_tile(picture.height, picture.width, tile))
        if picture.height > tile or picture.width > tile:
            rows, cols = picture.height // tile, picture.width // tile
            tiles = [picture.crop((c * tile, r * tile, (c + 1) * tile, (r + 1) * tile)) for r in range(rows)
                     for c in range(cols)]  # fmt: skip
            tiles.append(resize(tile, tile))
        else:
            tiles = [picture]
    return Tiles(torch.from_numpy(np.stack([_normalised(t, p) for t in tiles])), rows, cols)
