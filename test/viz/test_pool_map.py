"""pool_map reads every block's state from a real engine, and draw_pool_image puts each block's colour where the
grid says it is."""

import numpy as np
import pytest
from engine_helpers import make_engine

from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.viz.pool_map import (
    STATE_COLOURS,
    TASK_PALETTE,
    BlockState,
    PoolMap,
    draw_pool_image,
    grid_positions,
    grid_shape,
    pool_map,
    task_colours,
)

SCENE = Observation(text="A red cup stands on the wooden table next to a blue plate; the door is open. " * 3)


def _busy_engine(tiny_bundle, **overrides):
    """Cached blocks from a finished request, a prefix shared by two tasks, and blocks only one task holds."""
    engine = make_engine(tiny_bundle, **overrides)
    engine.generate([GenerateRequest("warm up on another scene", sampling=SamplingParams(max_new_tokens=2))])
    long = SamplingParams(max_new_tokens=200, ignore_eos=True)
    for task_id, prompt in [("vqa-1", "What colour is the cup?"), ("nav-1", "Where is the door?")]:
        engine.submit(GenerateRequest(prompt, task_id=task_id, observation=SCENE, sampling=long))
    engine.submit(GenerateRequest("Say something long.", task_id="chat-1", sampling=long))
    for _ in range(4):
        engine.step()
    return engine


MIXED = {"kv_dtype": "int8", "kv_task_dtypes": ["generic=fp32"]}  # generic blocks take 4 int8-sized units


@pytest.mark.parametrize("overrides", [{}, MIXED], ids=["one-format", "mixed"])
def test_states_agree_with_the_pool(tiny_bundle, overrides):
    """Counts are in pool units, which a mixed pool's wide blocks fill several of."""
    engine = _busy_engine(tiny_bundle, **overrides)
    pmap = pool_map(engine)
    stats = engine.stats()
    assert pmap.tasks == ("chat-1", "nav-1", "vqa-1")
    assert pmap.count(BlockState.FREE) == stats.free_blocks
    assert pmap.count(BlockState.CACHED) == stats.cached_blocks
    assert pmap.count(BlockState.USED) + pmap.count(BlockState.SHARED) == stats.used_blocks
    assert pmap.count(BlockState.SHARED) > 0 and pmap.count(BlockState.CACHED) > 0
    head = {u: b for b in engine.pool.blocks for u in b.extra_units}  # unit -> the wide block it belongs to
    for block in engine.pool.blocks:
        state = BlockState(pmap.states[block.block_id])
        held = head.get(block.block_id, block)
        assert (state in (BlockState.USED, BlockState.SHARED)) == (held.ref_count > 0)
        assert (pmap.owners[block.block_id] >= 0) == (state == BlockState.USED)
    assert bool(head) == bool(overrides)  # the mixed pool holds wide blocks
    per_task = {t.task_id: t.bytes // stats.bytes_per_block for t in stats.tasks}  # in units
    shared = pmap.count(BlockState.SHARED)
    for entry in pmap.legend()[len(STATE_COLOURS) :]:
        assert entry.count <= per_task[entry.label] <= entry.count + shared


def test_colours_follow_state_and_task(tiny_bundle):
    pmap = pool_map(_busy_engine(tiny_bundle))
    colours = pmap.colours()
    for block_id, state in enumerate(pmap.states):
        owner = pmap.owners[block_id]
        expected = task_colours(pmap.tasks)[pmap.tasks[owner]] if owner >= 0 else STATE_COLOURS[BlockState(state)]
        assert tuple(colours[block_id]) == expected
    legend = pmap.legend()
    assert sum(e.count for e in legend) == pmap.num_blocks
    assert len({e.colour for e in legend}) == len(legend)


def test_task_colours_are_distinct_and_stable():
    everything = list(TASK_PALETTE) + list(STATE_COLOURS.values())
    assert len(set(everything)) == len(everything)
    tasks = tuple(f"task-{i}" for i in range(len(TASK_PALETTE)))
    colours = task_colours(tasks)
    assert len(set(colours.values())) == len(tasks)
    # a task's colour does not depend on tasks that sort after it
    assert all(task_colours(tasks[: i + 1])[t] == colours[t] for i, t in enumerate(tasks))


@pytest.mark.parametrize("num_blocks", [1, 7, 16, 91, 20000])
def test_grid_holds_every_block_near_square(num_blocks):
    rows, cols = grid_shape(num_blocks)
    assert rows * cols >= num_blocks > (rows - 1) * cols and abs(rows - cols) <= 1
    positions = grid_positions(num_blocks)
    assert len({tuple(p) for p in positions}) == num_blocks and positions.max(axis=0).tolist() <= [rows - 1, cols - 1]


def test_image_shows_each_block_in_its_cell(tiny_bundle):
    pmap = pool_map(_busy_engine(tiny_bundle))
    image = draw_pool_image(pmap, grid_px=480)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    rows, cols = grid_shape(pmap.num_blocks)
    cell = 480 // max(rows, cols)
    margin, top = 12, 34 + 12  # draw_pool_image's layout: title bar, then the grid at the left margin
    colours = pmap.colours()
    for block_id, (row, col) in enumerate(grid_positions(pmap.num_blocks)):
        y, x = top + row * cell + cell // 2, margin + col * cell + cell // 2
        assert tuple(image[y, x]) == tuple(colours[block_id]), block_id


def test_big_pool_image_stays_small():
    states = np.zeros(20000, dtype=np.uint8)
    image = draw_pool_image(PoolMap("big", states, np.full(20000, -1), ()))
    assert image.shape[0] < 700 and image.shape[1] < 1000
