"""The overhead camera: a fixed room seen straight down, mapped onto the image with one scale.

The renderer draws with this model and the describer inverts it, so pixel -> room coordinates is the same function
the scene was drawn with rather than a second, drifting copy. World frame: x east (image right), y north (image up),
centimetres, origin at the room's south-west corner; yaw counter-clockwise from east, as in ROS.
"""

from dataclasses import dataclass

ROOM_WIDTH_CM = 320.0
ROOM_DEPTH_CM = 240.0


@dataclass(frozen=True)
class CameraModel:
    """An image of ``width`` x ``height`` pixels showing the whole room, centred, with square pixels."""

    width: int = 640
    height: int = 480

    def __post_init__(self) -> None:
        if self.width < 64 or self.height < 48:
            raise ValueError(f"the camera image must be at least 64x48 pixels, got {self.width}x{self.height}")

    @property
    def px_per_cm(self) -> float:
        return min(self.width / ROOM_WIDTH_CM, self.height / ROOM_DEPTH_CM)

    @property
    def _offset(self) -> tuple[float, float]:
        s = self.px_per_cm
        return (self.width - ROOM_WIDTH_CM * s) / 2, (self.height - ROOM_DEPTH_CM * s) / 2

    def to_pixel(self, x_cm: float, y_cm: float) -> tuple[float, float]:
        ox, oy = self._offset
        s = self.px_per_cm
        return ox + x_cm * s, oy + (ROOM_DEPTH_CM - y_cm) * s

    def to_room(self, u: float, v: float) -> tuple[float, float]:
        ox, oy = self._offset
        s = self.px_per_cm
        return (u - ox) / s, ROOM_DEPTH_CM - (v - oy) / s
