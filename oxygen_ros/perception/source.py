"""Where frames come from: the simulator, a video file or a folder of images, behind one ``next_frame()``.

Each source returns ``(stamp, rgb)``: seconds since the source started (simulated time, the video's own timeline,
or the image index over ``rate_hz``) and an HxWx3 uint8 RGB frame. Video and folder sources loop, so a camera
node fed from a short recording keeps publishing. Problems are reported when the source is made, naming the path:
a missing path (FileNotFoundError), a file OpenCV cannot decode or a folder without images (ValueError).
"""

from dataclasses import replace
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.render import render
from oxygen_ros.perception.scene import Scene, make_scene

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
SOURCE_KINDS = ("sim", "video", "folder")


class FrameSource(Protocol):
    def next_frame(self) -> tuple[float, np.ndarray]:
        """The next (stamp in seconds, HxWx3 uint8 RGB frame)."""

    def close(self) -> None:
        """Release the files or devices the source holds."""


def _check_rate(rate_hz: float) -> None:
    if not rate_hz > 0:
        raise ValueError(f"rate_hz must be positive, got {rate_hz}")


def _rgb(bgr: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


class SimSource:
    """The synthetic room of ``seed``; frame k shows simulated time k / rate_hz, so runs are repeatable. The robot
    drives: ``command`` (cm/s ahead, rad/s counter-clockwise, set by whoever drives it) moves ``scene.robot`` by one
    frame period before each frame, so the frames, their descriptions and the pose follow the commands."""

    def __init__(self, seed: int, rate_hz: float, camera: CameraModel) -> None:
        _check_rate(rate_hz)
        self.scene: Scene = make_scene(seed)
        self.camera = camera
        self.period = 1.0 / rate_hz
        self.command = (0.0, 0.0)
        self._index = 0

    def next_frame(self) -> tuple[float, np.ndarray]:
        t = self._index * self.period
        if self._index > 0 and self.command != (0.0, 0.0):
            self.scene = replace(self.scene, robot=self.scene.robot.moved(*self.command, self.period))
        self._index += 1
        return t, render(self.scene, t, self.camera)

    def close(self) -> None:
        """Nothing to release: frames are drawn in memory."""


class VideoSource:
    """A video file decoded by OpenCV, stamped by its frame rate, rewound at the end."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"video file {path} does not exist")
        self.path = path
        self._capture = cv2.VideoCapture(str(path))
        ok, first = self._capture.read() if self._capture.isOpened() else (False, None)
        if not ok:
            self._capture.release()
            raise ValueError(f"OpenCV cannot read a frame from {path}: not a video, or a codec it lacks")
        fps = self._capture.get(cv2.CAP_PROP_FPS)
        self.period = 1.0 / fps if fps > 0 else 1.0 / 30.0
        self._pending: np.ndarray | None = first
        self._index = 0

    def next_frame(self) -> tuple[float, np.ndarray]:
        frame, self._pending = self._pending, None
        if frame is None:
            ok, frame = self._capture.read()
            if not ok:
                self._capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
                ok, frame = self._capture.read()
                if not ok:
                    raise ValueError(f"{self.path} stopped yielding frames after rewinding")
        stamp = self._index * self.period
        self._index += 1
        return stamp, _rgb(frame)

    def close(self) -> None:
        self._capture.release()


class FolderSource:
    """The folder's images in file-name order, one every 1 / rate_hz seconds, starting over after the last. Images
    are decoded as they are needed (a long recording need not fit in memory); the first one at start-up, so a folder
    of the wrong files fails at once."""

    def __init__(self, path: str | Path, rate_hz: float) -> None:
        _check_rate(rate_hz)
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"image folder {path} does not exist")
        self.files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self.files:
            raise ValueError(f"image folder {path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        _read_image(self.files[0])
        self.period = 1.0 / rate_hz
        self._index = 0

    def next_frame(self) -> tuple[float, np.ndarray]:
        frame = _read_image(self.files[self._index % len(self.files)])
        stamp = self._index * self.period
        self._index += 1
        return stamp, frame

    def close(self) -> None:
        """Nothing to release: each image file is closed once read."""


def _read_image(file: Path) -> np.ndarray:
    bgr = cv2.imread(str(file), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError(f"OpenCV cannot decode the image {file}")
    return _rgb(bgr)


def make_source(kind: str, path: str, seed: int, rate_hz: float, width: int, height: int) -> FrameSource:
    """A source from the camera node's parameters; ``width`` / ``height`` size the simulator's frames only (video
    and folder frames keep their own size). ``rate_hz`` is checked for every kind: the node ticks at it."""
    _check_rate(rate_hz)
    if kind == "sim":
        return SimSource(seed, rate_hz, CameraModel(width=width, height=height))
    if kind in ("video", "folder") and not path:
        raise ValueError(f"source {kind!r} needs a path")
    if kind == "video":
        return VideoSource(path)
    if kind == "folder":
        return FolderSource(path, rate_hz)
    raise ValueError(f"unknown source {kind!r}; expected one of {', '.join(SOURCE_KINDS)}")
