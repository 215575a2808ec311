"""The acceptance check of the perception path: ten scripted questions about the simulated scene, answered by the
real SmolLM2 through the engine from the scene describer's text, at least 8 right.

The scene is the one camera_sim shows by default (seed 0), at the moment the obstacle crosses the robot's path.
Expected answers come from the scene's ground truth, never from the describer, so a wrong detection, a misleading
sentence or a wrong reading by the model all count against it. A check looks for the expected word (or number)
in the answer, and where the answer could name several objects it must be the first one named. No question offers
its answer as a choice ("left or right?"): SmolLM2-135M picks the last option offered whatever the observation says.
"""

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from perception_helpers import obstacle_truth, time_obstacle_at, x_straight_ahead

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.describe import compass, describe
from oxygen_ros.perception.palette import OBJECT_COLOURS
from oxygen_ros.perception.render import render
from oxygen_ros.perception.scene import SHAPES, Scene, make_scene

SEED = 0  # camera_sim's default scene (config/oxygen.yaml)
REQUIRED = 8
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


@dataclass(frozen=True)
class Question:
    text: str
    expected: str
    check: Callable[[str], bool]


def first_named(answer: str, options) -> str | None:
    """The option (a whole word) that the answer names first."""
    found = [(m.start(), o) for o in options if (m := re.search(rf"\b{re.escape(o)}\b", answer.lower()))]
    return min(found)[1] if found else None


def lengths_cm(answer: str) -> list[float]:
    """Every number in the answer, in centimetres (a number followed by m / metres is converted)."""
    values = []
    for m in re.finditer(r"(\d+(?:\.\d+)?)\s*(cm|centimet\w*|m\b|met\w*)?", answer.lower()):
        unit = m.group(2) or ""
        values.append(float(m.group(1)) * (100.0 if unit.startswith("m") else 1.0))
    return values


def first_count(answer: str) -> int | None:
    for word in re.findall(r"[a-z]+|\d+", answer.lower()):
        if word.isdigit() or word in NUMBER_WORDS:
            return int(word) if word.isdigit() else NUMBER_WORDS[word]
    return None


def says_clear(answer: str) -> bool | None:
    """True for yes / clear / free, False for no / not / blocked: whichever comes first."""
    for word in re.findall(r"[a-z]+", answer.lower()):
        if word in ("yes", "clear", "free"):
            return True
        if word in ("no", "not", "blocked"):
            return False
    return None


def questions(scene: Scene, t: float) -> list[Question]:
    """The ten questions and how to grade them, from the scene's ground truth at time ``t``."""
    robot, objects, colours = scene.robot, scene.objects, list(OBJECT_COLOURS)
    where = {o.colour: robot.relative(o.x_cm, o.y_cm) for o in objects}
    by_distance = sorted(objects, key=lambda o: math.hypot(*where[o.colour]))
    by_left = sorted(objects, key=lambda o: -where[o.colour][1])
    lone = [o for o in objects if sum(p.shape == o.shape for p in objects) == 1]
    ahead, left, blocked = obstacle_truth(scene, t)
    distance = math.hypot(ahead, left)
    facing = compass(robot.yaw_rad)
    # The scene must make every question unambiguous.
    assert lone and blocked
    assert math.hypot(*where[by_distance[1].colour]) - math.hypot(*where[by_distance[0].colour]) > 5
    assert where[by_left[0].colour][1] - where[by_left[1].colour][1] > 5
    assert abs(math.degrees(robot.yaw_rad) % 45 - 22.5) > 5  # not near the border of two compass directions

    named, sized, closest, leftmost = objects[0], objects[1], by_distance[0], by_left[0]
    return [
        Question("How many objects are on the table?", str(len(objects)), lambda a: first_count(a) == len(objects)),
        Question(f"What shape is the {named.colour} object?", named.shape,
                 lambda a: first_named(a, SHAPES) == named.shape),
        Question(f"What colour is the {lone[0].shape}?", lone[0].colour,
                 lambda a: first_named(a, colours) == lone[0].colour),
        Question("Which object is closest to the robot?", closest.colour,
                 lambda a: first_named(a, colours) == closest.colour),
        Question("What shape is the object closest to the robot?", closest.shape,
                 lambda a: first_named(a, SHAPES) == closest.shape),
        Question("Which object is furthest to the left?", leftmost.colour,
                 lambda a: first_named(a, colours) == leftmost.colour),
        Question("Is the path ahead clear?", "no", lambda a: says_clear(a) is False),
        Question("How far away is the obstacle?", f"{distance:.0f} cm",
                 lambda a: any(abs(v - distance) <= 10 for v in lengths_cm(a))),
        Question("Which direction is the robot facing?", facing, lambda a: first_named(a, [facing]) == facing),
        Question(f"How wide is the {sized.colour} {sized.shape}?", f"{sized.size_cm:.0f} cm",
                 lambda a: any(abs(v - sized.size_cm) <= 2 for v in lengths_cm(a))),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def engine() -> Engine:
    """The real SmolLM2 on CPU in float32 (the precision its answers were measured at)."""
    return Engine(EngineConfig(model="smollm2-135m", device="cpu", dtype="float32", kv_cache_bytes=64 << 20))


def test_smollm2_answers_scripted_questions_about_the_simulated_scene(engine):
    scene = make_scene(SEED)
    t = time_obstacle_at(scene.obstacle, x_straight_ahead(scene.robot, scene.obstacle.y_cm))
    text = describe(render(scene, t, CameraModel())).text
    asked = questions(scene, t)
    observation = Observation(observation_id=f"scene-{SEED}", text=text)
    requests = [
        GenerateRequest(q.text, task_type="vqa", observation=observation, sampling=SamplingParams(max_new_tokens=32))
        for q in asked
    ]
    outputs = engine.generate(requests)
    assert all(out.ok for out in outputs)
    graded = [(q, out.text, q.check(out.text)) for q, out in zip(asked, outputs, strict=True)]
    report = "\n".join(
        f"{'PASS' if ok else 'FAIL'} {q.text!r}: expected {q.expected!r}, got {a!r}" for q, a, ok in graded
    )
    correct = sum(ok for _, _, ok in graded)
    print(f"observation:\n{text}\n{report}\n{correct}/{len(graded)} correct")
    assert correct >= REQUIRED, f"{correct}/{len(graded)} correct, {REQUIRED} needed\nobservation:\n{text}\n{report}"
    assert sum(out.reused_prefix_tokens > 0 for out in outputs) >= len(outputs) - 1  # one shared observation prefix


@pytest.mark.parametrize(
    "answer, expected",
    [("The red triangle, then the blue circle.", "red"), ("It is blue; the red one is further.", "blue"), ("No", None)],
)
def test_first_named(answer, expected):
    assert first_named(answer, list(OBJECT_COLOURS)) == expected


def test_graders():
    assert lengths_cm("It is 1.2 m away, about 120 cm.") == [120.0, 120.0]
    assert first_count("There are six objects.") == 6 and first_count("There are 4 objects.") == 4
    assert says_clear("No, the obstacle blocks it.") is False and says_clear("The path is not clear.") is False
    assert says_clear("Yes, it is clear.") is True and says_clear("I do not know") is False
