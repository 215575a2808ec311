"""The task heads' JSON answers read as fields: the instruction head's names are narration and its stop flag holds the
arm, the navigation head's become the reasoning, and an answer that is not the schema's JSON (an error line, a cut
answer) is said as such and changes nothing."""

import json

import jsonschema

from oxygen_ros.nodes import narration, reasoning


def test_answers_are_read_as_fields():
    schema = json.loads(narration.SCHEMA)
    go = '{"colour":"red","shape":"triangle","stop":false}'
    jsonschema.validate(json.loads(go), schema)
    assert narration.read(go) == narration.HeadAnswer("reaching for: red triangle", False)
    halt = narration.read('{"colour":"none","shape":"none","stop":true}')
    assert halt.stop is True and "nothing" in halt.narration and "stop" in halt.narration
    assert narration.read("(language head: UNAVAILABLE: gone)") == narration.HeadAnswer(
        "(language head: UNAVAILABLE: gone)", None)  # fmt: skip
    cut = narration.read('{"colour":"red","sha')
    assert cut.stop is None and "max_new_tokens" in cut.narration


def test_navigation_reasoning_is_read_from_fields():
    schema = json.loads(reasoning.SCHEMA)
    blocked = '{"path_clear":false,"obstacle":"a chair"}'
    jsonschema.validate(json.loads(blocked), schema)
    assert reasoning.read(blocked) == "path ahead blocked by: a chair"
    assert reasoning.read('{"path_clear":true,"obstacle":""}') == "path ahead clear"
    assert reasoning.read('{"path_clear":tr').startswith("(language head: answer cut short")
    assert reasoning.read("(language head: DEADLINE_EXCEEDED: late)") == "(language head: DEADLINE_EXCEEDED: late)"
    too_deep = "[" * 5000 + "]" * 5000  # past json.loads' recursion: a server ignoring the schema; said, not raised
    assert reasoning.read(too_deep) == too_deep
