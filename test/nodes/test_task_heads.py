"""The instruction head's JSON answer read as fields: what it names is narration, its stop flag holds the arm, and an
answer that is not the schema's JSON (an error line, a cut answer) changes nothing."""

import json

import jsonschema

from oxygen_ros.nodes import narration


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
