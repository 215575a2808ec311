"""`bench --suite structured` at batch 1: the constrained answer is long (eight objects), its schema is valid JSON
Schema, and the overhead reported is the ratio of the two sides' decode times per token."""

import jsonschema
import pytest

from oxygen_ros.bench import structured_suite
from oxygen_ros.cli.bench import SUITES


def test_structured_suite_compares_equal_lengths():
    out = structured_suite.run(batches="1", repeats=1)
    details = out["details"]["n1"]
    assert details["answer_tokens"][0] > 60  # eight objects: a long answer, so per-token times mean something
    overhead = out["metrics"]["constraint_overhead_n1"]
    ratio = details["constrained_ms_per_token"] / details["free_ms_per_token"]  # ms rescale: an ulp apart at most
    assert overhead == pytest.approx(ratio - 1.0, rel=1e-9, abs=1e-12)
    assert SUITES["structured"] == "oxygen_ros.bench.structured_suite"
    jsonschema.Draft202012Validator.check_schema(structured_suite.SCHEMA)
