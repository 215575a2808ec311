"""Observation ids are content hashes; the ring keeps the latest few and explains what it cannot give."""

import numpy as np
import pytest

from oxygen_ros.engine.io import Observation
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.observations import ObservationRing, Rejected, content_id

IMAGE = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)


def test_equal_content_equal_id():
    assert content_id("cup", [IMAGE], [0.5]) == content_id("cup", [IMAGE.copy()], [0.5])
    others = {
        content_id("cup", [IMAGE], [0.25]),
        content_id("mug", [IMAGE], [0.5]),
        content_id("cup", [IMAGE + 1], [0.5]),
        content_id("cup", [IMAGE.reshape(3, 2, 3)], [0.5]),  # same bytes, other shape
        content_id("cup", [], [0.5]),
    }
    assert len(others) == 5 and content_id("cup", [IMAGE], [0.5]) not in others


def test_ring_keeps_the_latest_and_says_what_is_missing():
    ring = ObservationRing(2)
    assert ring.get("") is None  # nothing yet: the request runs without an observation
    for name in ("a", "b", "c"):
        assert ring.add(Observation(observation_id=name, text=name))
    assert not ring.add(Observation(observation_id="b", text="b again"))  # seen: not new, but now the latest
    assert len(ring) == 2 and ring.get("").text == "b again" and ring.get("c").text == "c"
    with pytest.raises(EngineError) as err:
        ring.get("a")
    assert err.value.code == ErrorCode.NOT_FOUND and "'a'" in err.value.message and "ring size 2" in err.value.message


def test_latest_prefers_a_described_frame_over_a_bare_image_just_in():
    ring = ObservationRing(4)
    ring.add(Observation(observation_id="f1", text="a red cup", images=[IMAGE]))
    ring.add(Observation(observation_id="f2", images=[IMAGE + 1]))  # its text is on the way
    assert ring.get("").observation_id == "f1"
    ring.add(Observation(observation_id="f2", text="a blue cup"))
    assert ring.get("").text == "a blue cup"
    images_only = ObservationRing(2)  # no describer (a VLA reads the images): the latest frame is the latest
    images_only.add(Observation(observation_id="g1", images=[IMAGE]))
    images_only.add(Observation(observation_id="g2", images=[IMAGE + 1]))
    assert images_only.get("").observation_id == "g2"


def test_rejected_frames_explain_themselves():
    ring = ObservationRing(4)
    ring.add(Observation(observation_id="good"))
    ring.add(Rejected("camera-frame", "unsupported image encoding '16UC1'"))
    for name in ("", "camera-frame"):
        with pytest.raises(EngineError) as err:
            ring.get(name)
        assert err.value.code == ErrorCode.INVALID_ARGUMENT and "16UC1" in err.value.message
    assert ring.get("good").observation_id == "good"


def test_ring_needs_room():
    with pytest.raises(ValueError, match="at least one"):
        ObservationRing(0)


def test_camera_frame_and_described_observation_of_one_frame_merge_in_either_order():
    image = np.full((4, 4, 3), 7, dtype=np.uint8)
    frame_id = content_id("", [image], [])
    bare = Observation(observation_id=frame_id, images=[image])
    described = Observation(observation_id=frame_id, text="a red cup", images=[image])
    for first, second in ((described, bare), (bare, described)):
        ring = ObservationRing(4)
        assert ring.add(first) and not ring.add(second)
        merged = ring.get(frame_id)
        assert merged.text == "a red cup" and len(merged.images) == 1 and len(ring) == 1
