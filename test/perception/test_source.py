"""Frame sources: the simulator is repeatable, video and folder sources replay files in order and loop, and every
way of pointing a source at the wrong thing fails at once with a message naming it."""

import cv2
import numpy as np
import pytest

from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.render import render
from oxygen_ros.perception.source import FolderSource, SimSource, VideoSource, make_source


def _frames(n: int, height: int = 48, width: int = 64) -> list[np.ndarray]:
    """Distinct RGB frames whose colour survives JPEG-style compression (flat, far-apart colours)."""
    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30), (30, 200, 200)]
    return [np.full((height, width, 3), colours[i % len(colours)], np.uint8) for i in range(n)]


def test_sim_source_is_repeatable_and_timed():
    a, b = SimSource(4, 5.0, CameraModel()), SimSource(4, 5.0, CameraModel())
    for k in range(3):
        (ta, fa), (tb, fb) = a.next_frame(), b.next_frame()
        assert ta == tb == pytest.approx(k / 5.0)
        assert np.array_equal(fa, fb)
        assert np.array_equal(fa, render(a.scene, ta, CameraModel()))
    other_seed = SimSource(5, 5.0, CameraModel()).next_frame()[1]
    assert not np.array_equal(other_seed, SimSource(4, 5.0, CameraModel()).next_frame()[1])


def test_folder_source_plays_sorted_files_and_loops(tmp_path):
    frames = _frames(3)
    for name, frame in zip(["b.png", "c.jpg", "a.png"], [frames[1], frames[2], frames[0]], strict=True):
        cv2.imwrite(str(tmp_path / name), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    (tmp_path / "notes.txt").write_text("not an image, ignored")
    source = FolderSource(tmp_path, rate_hz=2.0)
    played = [source.next_frame() for _ in range(4)]
    assert [t for t, _ in played] == [0.0, 0.5, 1.0, 1.5]
    for (_, got), want in zip(played, [frames[0], frames[1], frames[2], frames[0]], strict=True):
        assert np.abs(got.astype(int) - want).max() <= 3  # a.png, b.png, c.jpg (lossy), a.png again


@pytest.mark.parametrize("fourcc, suffix", [("MJPG", ".avi"), ("mp4v", ".mp4")])
def test_video_source_plays_frames_at_the_file_rate_and_rewinds(tmp_path, fourcc, suffix):
    path = tmp_path / f"clip{suffix}"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 4.0, (64, 48))
    frames = _frames(3)
    for frame in frames:
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    source = VideoSource(path)
    played = [source.next_frame() for _ in range(5)]
    source.close()
    assert [t for t, _ in played] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    for (_, got), want in zip(played, [*frames, *frames][: len(played)], strict=True):
        assert got.shape == (48, 64, 3) and got.dtype == np.uint8
        assert np.abs(got.astype(int) - want).mean() < 12  # lossy codecs, but the right frame in RGB order


def test_missing_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="clip.mp4"):
        VideoSource(tmp_path / "clip.mp4")
    with pytest.raises(FileNotFoundError, match="frames"):
        FolderSource(tmp_path / "frames", 10.0)


def test_unreadable_files(tmp_path):
    fake = tmp_path / "clip.mp4"
    fake.write_bytes(b"this is not a video")
    with pytest.raises(ValueError, match="cannot read a frame from .*clip.mp4"):
        VideoSource(fake)
    (tmp_path / "broken.png").write_bytes(b"\x89PNG but nothing else")
    with pytest.raises(ValueError, match="cannot decode the image .*broken.png"):
        FolderSource(tmp_path, 10.0)


def test_folder_without_images(tmp_path):
    (tmp_path / "readme.txt").write_text("no pictures here")
    with pytest.raises(ValueError, match="holds no images"):
        FolderSource(tmp_path, 10.0)


def test_make_source_checks_its_parameters(tmp_path):
    assert isinstance(make_source("sim", "", 1, 10.0, 320, 240), SimSource)
    assert make_source("sim", "", 1, 10.0, 320, 240).next_frame()[1].shape == (240, 320, 3)
    with pytest.raises(ValueError, match="unknown source 'webcam'"):
        make_source("webcam", "", 0, 10.0, 640, 480)
    with pytest.raises(ValueError, match="needs a path"):
        make_source("video", "", 0, 10.0, 640, 480)
    for kind in ("sim", "video", "folder"):
        for rate in (0.0, -1.0, float("nan")):
            with pytest.raises(ValueError, match="rate_hz must be positive"):
                make_source(kind, str(tmp_path), 0, rate, 640, 480)
