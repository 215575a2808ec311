"""Approximate observation reuse (``reuse_similarity_threshold``): a frame that differs from a recent one by less than
the threshold is served from that one's KV (pi05-causal-tiny: its image prefix; a text model: its scene text too); a
frame that differs more, or any frame with reuse off, is computed exactly."""

import pytest
from engine_helpers import make_engine

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.frame_reuse import MAX_AGE_NS, SimilarFrames, frame_difference, thumbnail
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError
from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.source import SimSource

THRESHOLD = 0.0035  # above the sensor noise between two frames of a still robot (~0.0026), below 5 cm of driving


@pytest.fixture(scope="module")
def frames():
    """The simulated room at 10 Hz while the robot drives: frame 1 is 2 cm on, frame 4 about 8 cm."""
    source = SimSource(3, 10.0, CameraModel(224, 224))
    source.command = (20.0, 0.2)
    return [source.next_frame()[1] for _ in range(5)]


def test_frames_are_matched_by_thumbnail_difference(frames):
    near = frame_difference(thumbnail(frames[0]), thumbnail(frames[1]))
    far = frame_difference(thumbnail(frames[0]), thumbnail(frames[4]))
    assert near < THRESHOLD < far
    reuse = SimilarFrames(THRESHOLD)
    first = Observation("f0", "frame zero", [frames[0]], [0.1])
    assert reuse.resolve(first) is first and reuse.resolve(Observation("no-image", "text only")).images == []
    served = reuse.resolve(Observation("f1", "frame one", [frames[1]], [0.2]))
    assert served.images[0] is frames[0] and served.text == "frame zero"
    assert (served.observation_id, served.state) == ("f1", [0.2])  # the new frame's id and state
    assert reuse.resolve(Observation("f4", "frame four", [frames[4]])).images[0] is frames[4]
    assert reuse.resolve(Observation("two", "", [frames[1], frames[1]])).images == [frames[1], frames[1]]
    assert reuse.reused == 1
    with pytest.raises(ValueError):
        SimilarFrames(0.0)
    for bad in (-0.1, 1.0, 1.5, float("nan")):  # 1.0 would reuse any frame at all
        with pytest.raises(EngineError, match=r"reuse_similarity_threshold must be in \[0, 1\)"):
            EngineConfig(reuse_similarity_threshold=bad).validate()


def test_a_stamped_frame_stands_in_only_for_frames_captured_soon_after_it(frames):
    """A still scene must not be served from one frame for minutes: stamped, an earlier frame stands in for one
    captured at most MAX_AGE_NS later; past that the new frame is computed and becomes the one that stands in."""
    reuse = SimilarFrames(THRESHOLD)
    first = Observation("f0", images=[frames[0]], stamp_ns=1_000_000_000)
    assert reuse.resolve(first) is first
    soon = reuse.resolve(Observation("f1", images=[frames[1]], stamp_ns=1_000_000_000 + MAX_AGE_NS))
    assert soon.images[0] is frames[0] and soon.stamp_ns == first.stamp_ns  # the pixels' own capture time
    late = Observation("f1-late", images=[frames[1].copy()], stamp_ns=1_000_000_001 + MAX_AGE_NS)
    assert reuse.resolve(late) is late  # as similar, but captured too long after frame 0
    later = reuse.resolve(Observation("f1-later", images=[frames[1]], stamp_ns=1_000_000_002 + MAX_AGE_NS))
    assert later.images[0] is late.images[0] and later.stamp_ns == late.stamp_ns
    assert reuse.reused == 2
    reuse = SimilarFrames(THRESHOLD)
    reuse.resolve(first)
    unstamped = reuse.resolve(Observation("f1-unstamped", images=[frames[1]]))  # its age unknown: not bounded
    assert unstamped.images[0] is frames[0]


def _act(engine, frame, index: int):
    obs = Observation(f"f{index}", images=[frame], state=[0.1 * index] * 8)
    greq = GenerateRequest("pick up the cup", observation=obs, want_actions=True, want_text=False,
                           sampling=SamplingParams(seed=7))  # fmt: skip
    return engine.generate([greq])[0]


@pytest.mark.parametrize("threshold", [0.0, THRESHOLD])
def test_pi05_reuses_a_similar_frames_image_prefix_only_when_asked(pi05_tiny, frames, threshold):
    engine = make_engine(pi05_tiny, reuse_similarity_threshold=threshold)
    outs = [_act(engine, frames[i], i) for i in (0, 1, 4)]
    assert all(o.ok and o.actions.shape == (10, 32) for o in outs)
    reused = [o.reused_prefix_tokens for o in outs]
    if threshold:
        assert reused[0] == 0 and reused[1] >= 256 and reused[2] == 0  # 256 image tokens of frame 0
        assert engine.similar_frames.reused == 1
    else:
        assert reused == [0, 0, 0] and engine.similar_frames is None


def test_a_text_model_answers_from_the_reused_frames_description(tiny_bundle, frames):
    engine = make_engine(tiny_bundle, reuse_similarity_threshold=THRESHOLD)
    sampling = SamplingParams(max_new_tokens=4, ignore_eos=True)

    def ask(i: int, text: str):
        obs = Observation(f"f{i}", text, [frames[i]])
        return engine.generate([GenerateRequest("What is on the table?", observation=obs, sampling=sampling)])[0]

    first, second = ask(0, "A red cup is on the table."), ask(1, "A red cup and a blue box are on the table.")
    assert second.token_ids == first.token_ids and second.reused_prefix_tokens >= second.prompt_tokens - 16
