"""`/oxygen/generate` on a real `oxygen_inference` (SmolLM2) through rclpy: the answer streams as feedback before the
result and the pieces add up to it, a cancel mid-stream ends it CANCELLED with no block held, sampling controls and
inline observations, chat messages and constraints work on /oxygen/infer and /oxygen/generate alike, bad values
are refused naming the field."""

import json

import jsonschema
import pytest
from action_msgs.msg import GoalStatus
from inference_client import infer, pool_stats, serving
from oxygen_ros.action import Generate
from oxygen_ros.msg import ChatMessage, Outcome
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.msg import Sampling
from rclpy.node import Node
from ros_harness import send_goal, wait_until


PARAMETERS = {"model": "smollm2-135m", "kv_cache_bytes": 64 << 20, "max_model_len": 512, "max_num_seqs": 4,
              "debug_checks": True}  # fmt: skip
SCENE = "A red apple and a green pear lie on the kitchen table."


@pytest.fixture(scope="module")
def client(ros_domain_id):
    with serving(ros_domain_id, PARAMETERS, "generate_test_client") as (_, client):
        yield client


def _no_block_held(client: Node) -> bool:
    stats = pool_stats(client)
    return stats.total_blocks - stats.free_blocks - stats.cached_blocks == 0 and stats.active_requests == 0


def test_feedback_streams_the_answer_before_the_result(client):
    goal = Generate.Goal(prompt="Name three fruits.", task_id="gen-1", max_new_tokens=24, feedback_every=2,
                         observation=[ObservationMsg(text=SCENE)])  # fmt: skip
    sent = send_goal(client, Generate, "/oxygen/generate", goal, timeout=30)
    done = sent.result(timeout=120)
    assert done.status == GoalStatus.STATUS_SUCCEEDED and done.result.success, done.result.message
    assert sent.streamed_text(done.result.text) == done.result.text != ""
    assert len(sent.feedback) >= 2
    counts = [f.generated_tokens for f in sent.feedback]
    assert counts == sorted(counts) and counts[-1] <= done.result.generated_tokens  # an end token adds no text


def test_cancel_mid_stream_ends_it_and_frees_its_blocks(client):
    goal = Generate.Goal(prompt="Count from one to two hundred, in words.", task_id="gen-2", max_new_tokens=400,
                         feedback_every=1)  # fmt: skip
    sent = send_goal(client, Generate, "/oxygen/generate", goal, timeout=30)
    sent.wait_feedback(2, timeout=120)
    sent.cancel()
    done = sent.result(timeout=30)
    assert done.status == GoalStatus.STATUS_CANCELED and done.result.error_code == "CANCELLED"
    assert 0 < done.result.generated_tokens < 400
    wait_until(lambda: _no_block_held(client), 10, "the cancelled request's blocks back in the pool")


def test_inline_observation_shares_kv_with_the_published_one_and_sampling_is_seeded(client):
    """The same scene inline twice: the second reuses the first one's prefix; a seeded sampled answer repeats; a
    stop string cuts the greedy answer before it."""
    scene = [ObservationMsg(text=SCENE)]
    seeded = Sampling(temperature=0.9, top_k=20, top_p=0.9, repetition_penalty=1.1, seed=11)
    first = infer(client, "What is on the table?", observation=scene, sampling=seeded, max_new_tokens=12)
    second = infer(client, "What is on the table?", observation=scene, sampling=seeded, max_new_tokens=12)
    assert first.success and second.success, (first.message, second.message)
    assert second.reused_prefix_tokens > 0 and second.text == first.text
    greedy = infer(client, "What is on the table?", observation=scene, max_new_tokens=24)
    word = greedy.text.split()[2]
    stopped = infer(client, "What is on the table?", observation=scene, max_new_tokens=24,
                    sampling=Sampling(stop=[word]))  # fmt: skip
    assert stopped.success and stopped.text == greedy.text[: greedy.text.find(word)]


@pytest.mark.parametrize("field,value", [("temperature", float("nan")), ("top_p", 2.0), ("top_k", -3),
                                         ("repetition_penalty", 0.0)])  # fmt: skip
def test_bad_sampling_values_are_refused_naming_the_field(client, field, value):
    bad = Sampling(**{field: value})
    response = infer(client, "Hello?", sampling=bad)
    assert response.error_code == "INVALID_ARGUMENT" and field in response.message
    sent = send_goal(client, Generate, "/oxygen/generate", Generate.Goal(prompt="Hello?", sampling=bad,
                                                                          max_new_tokens=4))  # fmt: skip
    done = sent.result(timeout=30)
    assert done.status == GoalStatus.STATUS_ABORTED and done.result.error_code == "INVALID_ARGUMENT"
    assert field in done.result.message


SCHEMA = ('{"type": "object", "properties": {"fruit": {"enum": ["apple", "pear", "plum"]}, "count": {"type": '
          '"integer", "minimum": 0, "maximum": 9}}, "required": ["fruit", "count"], "additionalProperties": false}')


def test_chat_and_a_json_schema_over_ros(client):
    """A conversation with a per-request system prompt and a JSON schema through /oxygen/infer and /oxygen/generate:
    the answer validates, ends `stop`, carries its log-probabilities, and turn 2 reuses turn 1 from the pool."""
    scene = [ObservationMsg(text=SCENE)]
    first = infer(client, "Which fruits are on the table?", observation=scene, system_prompt="Answer in JSON.",
                  json_schema=SCHEMA, logprobs=2, max_new_tokens=32)  # fmt: skip
    assert first.success and first.finish_reason == Outcome.FINISH_STOP, first.message
    jsonschema.validate(json.loads(first.text), json.loads(SCHEMA))
    assert len(first.logprobs) == first.generated_tokens and len(first.logprobs[0].top_ids) == 2
    history = [ChatMessage(role="user", content="Which fruits are on the table?"),
               ChatMessage(role="assistant", content=first.text)]  # fmt: skip
    goal = Generate.Goal(prompt="Which one is green?", messages=history, observation=scene, max_new_tokens=16,
                         system_prompt="Answer in JSON.", regex="(apple|pear|plum)")  # fmt: skip
    done = send_goal(client, Generate, "/oxygen/generate", goal, timeout=30).result(timeout=120)
    assert done.result.success and done.result.text in ("apple", "pear", "plum"), done.result.message
    assert done.result.finish_reason == Outcome.FINISH_STOP
    assert done.result.reused_prefix_tokens >= first.prompt_tokens // 16 * 16 - 16


@pytest.mark.parametrize("fields, code, field", [
    ({"json_schema": "{", "regex": "a"}, Outcome.INVALID_ARGUMENT, "json_schema and regex"),
    ({"json_schema": "{not json"}, Outcome.INVALID_ARGUMENT, "json_schema"),
    ({"grammar": "x" * 70_000}, Outcome.OUT_OF_RANGE, "grammar"),
    ({"tools": "[1, 2"}, Outcome.INVALID_ARGUMENT, "tools"),
    ({"template_options": '{"enable_thinking": false}'}, Outcome.INVALID_ARGUMENT, "template_options"),
    ({"raw": True, "system_prompt": "hi"}, Outcome.INVALID_ARGUMENT, "system_prompt"),
    ({"logprobs": 40}, Outcome.INVALID_ARGUMENT, "logprobs"),
])  # fmt: skip
def test_bad_chat_and_constraint_fields_are_refused_naming_the_field(client, fields, code, field):
    response = infer(client, "Hello?", **fields)
    assert response.error_code == code and field in response.message, response.message
    assert infer(client, "Hello?", max_new_tokens=2).success  # the node keeps serving
