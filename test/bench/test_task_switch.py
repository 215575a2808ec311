"""Zero-copy task switching: ``bench.task_switch.transfer`` hands a running request, with its KV, to another task by relabelling
it; its block table and the blocks' reference counts stay as they were, it answers what it would have answered, and
the pool's per-task accounting follows it.  The copying alternative (``bench.task_switch.copy_switch``) must leave
the same answer too, since the benchmark compares the two."""

import pytest
from engine_helpers import make_engine

from oxygen_ros.bench.task_switch import copy_switch, transfer
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.request import SERVE_LANGUAGE, SERVE_VQA
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode

SCENE = Observation("scene", "A red cup, a blue box and a green plate are on the kitchen table. " * 4)


def _greq() -> GenerateRequest:
    return GenerateRequest("What is on the table?", task_id="navigation", task_type="navigation", observation=SCENE,
                           sampling=SamplingParams(max_new_tokens=8, ignore_eos=True))  # fmt: skip


def _finish(engine, request_id: str):
    while True:
        for out in engine.step():
            if out.request_id == request_id:
                return out


@pytest.mark.parametrize("switch", ["transfer", "copy"])
def test_a_switched_request_keeps_its_answer(tiny_bundle, switch):
    (expected,) = make_engine(tiny_bundle).generate([_greq()])
    engine = make_engine(tiny_bundle)
    request_id = engine.submit(_greq())
    engine.step()  # prefilled: it holds the observation's blocks
    req = engine.requests[request_id]
    table, refs = list(req.block_table), [engine.pool.blocks[b].ref_count for b in req.block_table]
    if switch == "transfer":
        transfer(engine, request_id, "vqa-asker", "vqa")
        assert req.block_table == table and [engine.pool.blocks[b].ref_count for b in table] == refs
    else:
        copy_switch(engine, req, "vqa-asker")
        assert not set(req.block_table) & set(table)  # every block copied
    (usage,) = engine.stats().tasks
    assert (usage.task_id, usage.blocks) == ("vqa-asker", len(table))
    out = _finish(engine, request_id)
    assert out.task_id == "vqa-asker" and out.token_ids == expected.token_ids
    engine.check_invariants()
    assert engine.pool.num_used == 0


def test_transfer_changes_the_service_class_and_checks_its_arguments(tiny_bundle):
    engine = make_engine(tiny_bundle)
    request_id = engine.submit(_greq())
    assert engine.requests[request_id].service_class == SERVE_LANGUAGE
    transfer(engine, request_id, "asker", "vqa")  # queued requests move too
    assert engine.requests[request_id].service_class == SERVE_VQA
    transfer(engine, request_id, "other")  # the task type stays
    assert engine.requests[request_id].task_type == "vqa"
    for args, code in [(("nope", "x"), ErrorCode.NOT_FOUND), ((request_id, ""), ErrorCode.INVALID_ARGUMENT),
                       ((request_id, "x", "cooking"), ErrorCode.INVALID_ARGUMENT)]:  # fmt: skip
        with pytest.raises(EngineError) as err:
            transfer(engine, *args)
        assert err.value.code == code
