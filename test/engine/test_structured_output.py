"""Constrained answers on the real SmolLM2 weights: JSON schemas checked by the `jsonschema` library, regex and GBNF
answers matched by `re`, constrained and free requests in one batch equal to each alone, hostile grammars refused or
bounded, preempted constrained requests resuming as they would have run, and log-probabilities equal to
transformers' on the same weights."""

import json
import re
import time
from dataclasses import replace

import jsonschema
import pytest
import torch
from engine_helpers import make_engine
from hf_reference import hf_smollm2

from oxygen_ros.bench.preemption_workload import POOL_BLOCKS, preemption_requests
from oxygen_ros.bounds import json_depth
from oxygen_ros.engine.io import Constraint, GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode

OBJECTS = [("red", "cup", 10, 40), ("blue", "box", -20, 55), ("green", "apple", 5, 30), ("yellow", "banana", 30, 45),
           ("white", "plate", 0, 35), ("black", "phone", -10, 25), ("orange", "ball", 25, 60),
           ("purple", "book", -30, 50), ("grey", "bottle", 15, 70)]  # fmt: skip
COLORS = [c for c, *_ in OBJECTS]
SCENE = "A table seen from the robot's camera. " + " ".join(
    f"A {c} {s} is {x} cm left and {y} cm ahead." for c, s, x, y in OBJECTS
)
OBS = Observation(observation_id="table", text=SCENE)


def _object(properties: dict) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


NAME = {"type": "string", "maxLength": 16}
SCHEMAS = [  # (schema, questions, budget): enums, nested arrays and numeric ranges
    (_object({"color": {"enum": COLORS}, "confidence_pct": {"type": "integer", "minimum": 0, "maximum": 100}}),
     [f"What color is the {s}?" for _, s, *_ in OBJECTS] + ["What color is the largest object?"], 48),
    (_object({"objects": {"type": "array", "minItems": 1, "maxItems": 3, "items": _object(
        {"name": NAME, "left_cm": {"type": "integer", "minimum": -100, "maximum": 100}})}}),
     [f"List up to three objects near the {s}." for _, s, *_ in OBJECTS] + ["Which objects are on the left?"], 128),
    (_object({"action": {"enum": ["pick", "place", "push", "wait", "stop"]}, "target": NAME,
              "speed": {"type": "integer", "minimum": 1, "maximum": 5}}),
     [f"Plan one action to tidy the {s}." for _, s, *_ in OBJECTS] + ["What should the arm do first?"], 48),
    (_object({"answer": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 40}}),
     [f"Is the {s} within reach of 40 cm?" for _, s, *_ in OBJECTS] + ["Is the table empty?"], 48),
    (_object({"waypoints": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": -100, "maximum": 100}}}}),
     [f"Give waypoints in cm to reach the {s}." for _, s, *_ in OBJECTS] + ["Give a path around the table."], 64),
]  # fmt: skip


@pytest.fixture(scope="module")
def engine(smollm2_bundle):
    return make_engine(smollm2_bundle, kv_cache_bytes=128 << 20)


def _ask(prompt: str, constraint: Constraint | None, budget: int = 48, **kw) -> GenerateRequest:
    return GenerateRequest(prompt, task_type="vqa", observation=OBS, constraint=constraint,
                           sampling=SamplingParams(max_new_tokens=budget, **kw))  # fmt: skip


def test_fifty_schema_answers_validate_and_end_within_budget(engine):
    cases = [(schema, q, budget) for schema, questions, budget in SCHEMAS for q in questions]
    assert len(cases) == 50
    outs = engine.generate([_ask(q, Constraint("json_schema", json.dumps(s)), budget) for s, q, budget in cases])
    for (schema, question, _), out in zip(cases, outs):
        assert out.ok and out.finish_reason == "stop", (question, out.text, out.finish_reason)
        jsonschema.validate(json.loads(out.text), schema)
    engine.check_invariants()


@pytest.mark.parametrize("kind, source, pattern", [
    ("regex", r"(left|right|forward|stop)( [1-9][0-9]? cm)?", r"(left|right|forward|stop)( [1-9][0-9]? cm)?"),
    ("grammar", 'root ::= "move " dir " " num "cm"\ndir ::= "left" | "right"\nnum ::= [1-9] [0-9]?',
     r"move (left|right) [1-9][0-9]?cm"),
])  # fmt: skip
def test_regex_and_grammar_answers_match(engine, kind, source, pattern):
    greedy, sampled = engine.generate([_ask("Where should the robot go to reach the cup?", Constraint(kind, source)),
                                       _ask("Where should the robot go?", Constraint(kind, source), temperature=1.0,
                                            seed=7)])  # fmt: skip
    for out in (greedy, sampled):
        assert out.ok and out.finish_reason == "stop" and re.fullmatch(pattern, out.text), out.text


def test_mixed_batch_equals_each_request_alone(engine):
    schema = json.dumps(SCHEMAS[0][0])
    requests = [
        _ask("What color is the cup?", Constraint("json_schema", schema)),
        _ask("What color is the cup?", None),
        _ask("Which way is the ball?", Constraint("regex", "(left|right)")),
        _ask("Describe the table.", None, temperature=0.8, seed=3),
        _ask("What color is the book?", Constraint("json_schema", schema), temperature=0.8, seed=5),
    ]
    together = engine.generate(requests)
    alone = [engine.generate([r])[0] for r in requests]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert together[0].text != together[1].text  # the constraint changed the answer's shape


def test_json_answers_are_at_least_as_accurate_as_free_text(engine):
    """VQA on the scene: the JSON answer's color enum is right at least as often as the free answer names it."""
    schema = Constraint("json_schema", json.dumps(_object({"color": {"enum": COLORS}})))
    questions = [(f"What color is the {s}? Answer in JSON.", c) for c, s, *_ in OBJECTS]
    free = engine.generate([_ask(q, None) for q, _ in questions])
    shaped = engine.generate([_ask(q, schema) for q, _ in questions])
    free_right = sum(color in out.text.lower() for (_, color), out in zip(questions, free))
    json_right = sum(json.loads(out.text)["color"] == color for (_, color), out in zip(questions, shaped))
    print(f"VQA colour accuracy: free text {free_right}/9, JSON schema {json_right}/9")
    assert json_right >= free_right


def test_hostile_constraints_are_refused_or_bounded(engine):
    def refused(constraint: Constraint, code: ErrorCode) -> None:
        with pytest.raises(EngineError) as err:
            engine.submit(_ask("hi", constraint))
        assert err.value.code == code and constraint.kind in err.value.message

    nested: dict = {"type": "integer"}
    for _ in range(80):
        nested = _object({"a": nested})
    refused(Constraint("json_schema", json.dumps(nested)), ErrorCode.OUT_OF_RANGE)
    refused(Constraint("json_schema", "x" * 70_000), ErrorCode.OUT_OF_RANGE)
    # brackets inside a string neither hide depth (json.loads' RecursionError was INTERNAL) nor count as depth
    hidden = '{"description": "' + "]" * 2000 + '", "items": ' + "[" * 2000 + "]" * 2000 + "}"
    refused(Constraint("json_schema", hidden), ErrorCode.OUT_OF_RANGE)
    assert json_depth(json.dumps({"type": "string", "description": '[[{{ "quoted" \\'})) == 1
    refused(Constraint("json_schema", "{not json"), ErrorCode.INVALID_ARGUMENT)
    refused(Constraint("json_schema", "true"), ErrorCode.INVALID_ARGUMENT)  # JSON Schema allows it; not an answer shape
    refused(Constraint("regex", "[a-z]+("), ErrorCode.INVALID_ARGUMENT)
    refused(Constraint("grammar", "root ::= missing_rule"), ErrorCode.INVALID_ARGUMENT)
    huge_enum = {"enum": [f"item-{i}" for i in range(4000)]}
    recursive = {"$ref": "#/$defs/node", "$defs": {"node": _object({"child": {"anyOf": [{"type": "null"},
                                                                                         {"$ref": "#/$defs/node"}]}})}}
    start = time.perf_counter()
    enum_out, tree_out = engine.generate([_ask("Pick one.", Constraint("json_schema", json.dumps(huge_enum)), 16),
                                          _ask("Nest deeply.", Constraint("json_schema", json.dumps(recursive)), 32)])
    assert time.perf_counter() - start < 60
    assert json.loads(enum_out.text) in huge_enum["enum"]
    assert tree_out.ok and tree_out.finish_reason in ("stop", "length")  # bounded by its budget, never a hang
    assert engine.generate([_ask("Still serving?", None, 4)])[0].ok
    engine.check_invariants()
    assert engine.stats().used_blocks == 0


def test_constraint_needs_a_text_answer(engine):
    greq = _ask("hi", Constraint("regex", "a"))
    greq.want_text, greq.want_actions = False, True
    with pytest.raises(EngineError) as err:
        engine.submit(greq)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and "regex" in err.value.message


def test_logprobs_equal_transformers(engine):
    """Each greedy token's log-probability and its top alternatives, as transformers computes them on the same
    weights (log_softmax of the raw logits), and the constrained answer reports the model's raw distribution too."""
    greq = GenerateRequest("Name a primary color.", logprobs=5, sampling=SamplingParams(max_new_tokens=6))
    (out,) = engine.generate([greq])
    model, _ = hf_smollm2()
    ids = engine.encode(greq) + out.token_ids
    with torch.inference_mode():
        reference = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    start = len(ids) - len(out.token_ids) - 1
    assert [lp.token_id for lp in out.logprobs] == out.token_ids
    for i, lp in enumerate(out.logprobs):
        row = reference[start + i]
        assert lp.logprob == pytest.approx(float(row[lp.token_id]), abs=2e-3)
        assert lp.top_ids[0] == lp.token_id and len(lp.top_ids) == 5 == len(lp.top_tokens)
        assert lp.top_logprobs == pytest.approx(torch.topk(row, 5).values.tolist(), abs=2e-3)
    assert "".join(lp.token for lp in out.logprobs).startswith(out.text)
    with pytest.raises(EngineError) as err:
        engine.submit(GenerateRequest("hi", logprobs=21))
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and "logprobs" in err.value.message


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_constrained_requests_survive_preemption(smollm2_bundle, mode):
    """Four constrained requests in a pool that holds half of what they grow to: preempted and resumed (recomputed
    or swapped), each answers what it answers in a roomy pool, and every answer still matches its regex."""
    pattern = r"[a-z ,]{40,200}"

    def run(engine) -> list[list[int]]:
        requests = [replace(r, constraint=Constraint("regex", pattern)) for r in preemption_requests()]
        outs = engine.generate(requests)
        assert all(o.ok and re.fullmatch(r"[a-z ,]*", o.text) for o in outs), [o.text for o in outs]
        return [o.token_ids for o in outs]

    roomy = run(make_engine(smollm2_bundle))
    tier = {"cpu_tier_bytes": 64 << 20, "cpu_tier_format": "pool"} if mode == "swap" else {}
    bpb = make_engine(smollm2_bundle, kv_cache_bytes=1 << 20).layout.bytes_per_block
    tight = make_engine(smollm2_bundle, kv_cache_bytes=POOL_BLOCKS * bpb, preemption_mode=mode, **tier)
    assert run(tight) == roomy
    costs = tight.kv_manager.costs
    assert (costs.swapped if mode == "swap" else costs.recomputed) > 0
    tight.check_invariants()
    assert tight.pool.num_used == 0
