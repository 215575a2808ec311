"""Observation ids are content hashes; the ring keeps the latest few, and those of the last few seconds whatever the
frame rate, within a byte bound, and explains what it cannot give."""

import numpy as np
import pytest

from oxygen_ros.engine.io import Observation
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.observations import ENTRY_BYTES, ObservationRing, Rejected, content_id

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


def test_a_policy_asking_for_the_latest_gets_the_latest_frame_with_images():
    ring = ObservationRing(4)
    assert ring.count_with_images() == 0
    ring.add(Observation(observation_id="f1", text="a red cup", images=[IMAGE]))
    ring.add(Observation(observation_id="f2", text="a blue cup"))  # the describer's text before the frame's Image
    assert ring.get("").observation_id == "f2" and ring.get("", needs_images=True).observation_id == "f1"
    assert (len(ring), ring.count_with_images()) == (2, 1)
    ring.add(Observation(observation_id="f2", images=[IMAGE + 1]))
    assert ring.get("", needs_images=True).text == "a blue cup" and ring.count_with_images() == 2
    text_only = ObservationRing(2)
    text_only.add(Observation(observation_id="t1", text="no camera yet"))
    assert text_only.get("", needs_images=True).observation_id == "t1"  # the engine then names the missing image


def test_once_the_robot_sends_camera_sets_a_policy_reads_only_those():
    """A robot with an observation_node: its keyed sets carry every camera; a raw frame on the camera topic, newer,
    is one camera (the policy would run with the others masked), so a policy reads the newest set, and with none
    kept (a camera silent: the sets are held back) it is refused FAILED_PRECONDITION. A question reads the newest
    frame as before, and a robot that never sent a set has its raw frames read."""
    ring = ObservationRing(3)
    ring.add(Observation(observation_id="raw1", images=[IMAGE]))
    assert ring.get("", needs_images=True).observation_id == "raw1"  # one camera, no sets: its frames
    ring.add(Observation(observation_id="set1", images=[IMAGE, IMAGE + 1], image_keys=["top", "wrist"]))
    ring.add(Observation(observation_id="raw2", images=[IMAGE + 2]))
    assert ring.get("", needs_images=True).observation_id == "set1" and ring.get("").observation_id == "raw2"
    for i in range(3):  # the wrist camera goes silent: only raw frames come, and the last set leaves the ring
        ring.add(Observation(observation_id=f"raw{3 + i}", images=[IMAGE + 3 + i]))
    with pytest.raises(EngineError) as err:
        ring.get("", needs_images=True)
    assert err.value.code == ErrorCode.FAILED_PRECONDITION and "no camera set" in err.value.message
    assert ring.get("").observation_id == "raw5"


def test_told_camera_sets_only_a_policy_never_reads_a_raw_frame_even_before_the_first_set():
    """``camera_sets_only`` (a robot with an observation_node): before its first set comes (a camera still starting,
    the sets held back), a raw frame on the camera topic would fill one camera's slot with the others masked."""
    ring = ObservationRing(3, camera_sets=True)
    ring.add(Observation(observation_id="raw1", images=[IMAGE]))
    with pytest.raises(EngineError) as err:
        ring.get("", needs_images=True)
    assert err.value.code == ErrorCode.FAILED_PRECONDITION and "no camera set" in err.value.message
    assert ring.get("").observation_id == "raw1"  # a question still reads it
    ring.add(Observation(observation_id="set1", images=[IMAGE, IMAGE + 1], image_keys=["top", "wrist"]))
    assert ring.get("", needs_images=True).observation_id == "set1"


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


class Clock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _found(ring: ObservationRing, observation_id: str) -> bool:
    try:
        return ring.get(observation_id) is not None
    except EngineError as err:
        assert err.code == ErrorCode.NOT_FOUND
        return False


def test_at_30_hz_an_id_read_stays_answerable_for_keep_s():
    clock, hz, keep_s = Clock(), 30, 5.0
    ring = ObservationRing(8, keep_s=keep_s, clock=clock)
    ring.add(Observation(observation_id="read", text="the frame a client just read"))
    read_at, frames = clock.now, int(keep_s * hz) - 1
    for k in range(1, frames + 1):  # a camera at 30 Hz, for just under keep_s
        clock.now = read_at + k / hz
        ring.add(Observation(observation_id=f"frame-{k}", text="later"))
    assert frames > 8 * 10 and _found(ring, "read")  # far more frames than the count, still there
    clock.now = read_at + keep_s
    ring.add(Observation(observation_id="one-more", text="later"))
    assert not _found(ring, "read")  # beyond the count and keep_s old: gone
    assert len(ring) == frames + 1  # what the last keep_s brought, no more


def test_keep_s_zero_is_a_ring_of_the_count():
    ring = ObservationRing(3, keep_s=0.0, clock=Clock())
    for i in range(10):
        ring.add(Observation(observation_id=f"f{i}"))
    assert len(ring) == 3 and _found(ring, "f7") and not _found(ring, "f6")


def test_over_the_byte_bound_the_oldest_go_first_and_the_newest_always_stays():
    image = np.zeros((10, 10, 3), dtype=np.uint8)  # 300 bytes
    size = ENTRY_BYTES + 300 + 100  # an entry with this image and a short text, roughly
    ring = ObservationRing(2, keep_s=60.0, max_bytes=4 * size, clock=Clock())
    for i in range(6):
        ring.add(Observation(observation_id=f"f{i}", images=[image]))
    assert len(ring) == 4 and not _found(ring, "f1") and _found(ring, "f2")  # within 60 s but over the bytes
    huge = np.zeros((100, 100, 3), dtype=np.uint8)
    ring.add(Observation(observation_id="huge", images=[huge]))  # alone larger than the bound: kept, alone
    assert len(ring) == 1 and _found(ring, "huge")
    ring.add(Observation(observation_id="small", images=[image]))  # still over the bytes with both: the oldest goes
    assert len(ring) == 1 and _found(ring, "small")


def test_a_rejection_keeps_its_code():
    ring = ObservationRing(2)
    ring.add(Rejected("big", "image width is 9000 pixels, more than the bound of 8192 pixels", ErrorCode.OUT_OF_RANGE))
    with pytest.raises(EngineError) as err:
        ring.get("big")
    assert err.value.code == ErrorCode.OUT_OF_RANGE and "9000 pixels" in err.value.message
