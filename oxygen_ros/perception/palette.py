"""The scene's colours, shared by the renderer (what to draw) and the describer (what a hue means).

Object colours are saturated and at least 13 OpenCV hue steps apart, so the nearest palette hue names a pixel's
colour; every surface (floor, table, obstacle) is unsaturated, so saturation alone separates objects from
background. The robot is a cyan disc with a white nose: cyan is no object's colour, white is the only bright
unsaturated thing.
"""

import cv2
import numpy as np

RGB = tuple[int, int, int]

OBJECT_COLOURS: dict[str, RGB] = {
    "red": (220, 30, 30),
    "orange": (245, 125, 20),
    "yellow": (240, 220, 30),
    "green": (40, 170, 60),
    "blue": (30, 70, 220),
    "purple": (140, 50, 200),
}
ROBOT_BODY: RGB = (20, 200, 210)
ROBOT_NOSE: RGB = (255, 255, 255)
FLOOR: RGB = (150, 150, 150)
TABLE: RGB = (200, 170, 130)
OBSTACLE: RGB = (60, 60, 60)


def hue(rgb: RGB) -> int:
    """OpenCV hue (0..179) of one colour."""
    pixel = np.array([[rgb]], dtype=np.uint8)
    return int(cv2.cvtColor(pixel, cv2.COLOR_RGB2HSV)[0, 0, 0])
