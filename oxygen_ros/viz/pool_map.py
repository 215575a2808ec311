"""What every block of the KV pool is doing, as data, colours and a heatmap image (no ROS here).

A block is free (no KV), cached (no owner, reusable prefix), used by exactly one task, or shared by several tasks
(one computed prefix serving them all: the point of the unified pool). Blocks are laid out row-major on a near-square
grid, block id = row * cols + col, so the picture, the ROS markers and the block ids all line up. Task colours come
from a hash of the task id (see task_colours), not from the order tasks appear, so a task keeps its colour across
frames and runs.
"""

import hashlib
import math
from dataclasses import dataclass
from enum import IntEnum

import cv2
import numpy as np

from oxygen_ros.engine.engine import Engine

RGB = tuple[int, int, int]


class BlockState(IntEnum):
    FREE = 0
    CACHED = 1
    USED = 2  # referenced by requests of one task
    SHARED = 3  # referenced by requests of several tasks


STATE_COLOURS: dict[BlockState, RGB] = {
    BlockState.FREE: (45, 45, 45),
    BlockState.CACHED: (95, 115, 165),
    BlockState.SHARED: (255, 215, 0),
}
# Used blocks take their task's colour: distinct from each other and from the state colours above.
TASK_PALETTE: tuple[RGB, ...] = (
    (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (227, 119, 194),
    (23, 190, 207), (188, 189, 34), (140, 86, 75), (152, 223, 138), (255, 152, 150),
)  # fmt: skip


def task_colours(tasks: tuple[str, ...]) -> dict[str, RGB]:
    """Each task's colour: the palette entry its id hashes to, or (on a clash with a task earlier in sorted order)
    the next free one, so up to len(TASK_PALETTE) tasks on screen always differ and a task's colour stays put
    unless another task took it first."""
    taken: set[int] = set()
    out = {}
    for task_id in sorted(tasks):
        slot = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:4], "little") % len(TASK_PALETTE)
        for _ in range(len(TASK_PALETTE)):
            if slot not in taken:
                break
            slot = (slot + 1) % len(TASK_PALETTE)
        taken.add(slot)
        out[task_id] = TASK_PALETTE[slot]
    return out


@dataclass(frozen=True)
class LegendEntry:
    label: str
    colour: RGB
    count: int


@dataclass(frozen=True)
class PoolMap:
    """Per-block state of one pool at one instant."""

    model: str
    states: np.ndarray  # [num_blocks] BlockState values
    owners: np.ndarray  # [num_blocks] index into ``tasks`` for USED blocks, -1 otherwise
    tasks: tuple[str, ...]  # task ids holding blocks, sorted (task_colours relies on that order)

    @property
    def num_blocks(self) -> int:
        return len(self.states)

    def count(self, state: BlockState) -> int:
        return int(np.count_nonzero(self.states == state))

    def colours(self) -> np.ndarray:
        """[num_blocks, 3] uint8 RGB colour of each block."""
        table = np.array([STATE_COLOURS.get(s, (0, 0, 0)) for s in BlockState], dtype=np.uint8)
        out = table[self.states]
        for i, colour in enumerate(task_colours(self.tasks).values()):
            out[self.owners == i] = colour
        return out

    def legend(self) -> list[LegendEntry]:
        """One entry per state and per task holding blocks, with its colour and block count."""
        entries = [LegendEntry(s.name.lower(), STATE_COLOURS[s], self.count(s)) for s in STATE_COLOURS]
        owned = np.bincount(self.owners[self.owners >= 0], minlength=len(self.tasks))
        colours = task_colours(self.tasks).values()
        return entries + [LegendEntry(t, c, int(n)) for t, c, n in zip(self.tasks, colours, owned, strict=True)]

    def summary(self) -> str:
        counts = ", ".join(f"{s.name.lower()} {self.count(s)}" for s in BlockState)
        return f"{self.model}: {self.num_blocks} KV blocks ({counts})"


def pool_map(engine: Engine) -> PoolMap:
    """Read the engine's pool; call it on the engine's own thread (AsyncEngine.call) so nothing moves meanwhile."""
    holders: dict[int, set[str]] = {}
    for req in engine.requests.values():
        for block_id in req.block_table:
            holders.setdefault(block_id, set()).add(req.task_id)
    tasks = tuple(sorted(set().union(*holders.values()))) if holders else ()
    index = {task_id: i for i, task_id in enumerate(tasks)}
    blocks = engine.pool.blocks
    states = np.array(
        [BlockState.CACHED if b.block_hash is not None else BlockState.FREE for b in blocks], dtype=np.uint8
    )
    owners = np.full(len(blocks), -1, dtype=np.int32)
    for block_id, task_ids in holders.items():
        if len(task_ids) > 1:
            states[block_id] = BlockState.SHARED
        else:
            states[block_id] = BlockState.USED
            owners[block_id] = index[next(iter(task_ids))]
    for block in blocks:  # a wide format's block (mixed-format pools) also fills its other units
        if block.extra_units:
            states[block.extra_units], owners[block.extra_units] = states[block.block_id], owners[block.block_id]
    return PoolMap(engine.bundle.model_id, states, owners, tasks)


def grid_shape(num_blocks: int) -> tuple[int, int]:
    """(rows, cols) of the near-square grid that holds ``num_blocks`` blocks row-major."""
    cols = max(1, math.ceil(math.sqrt(num_blocks)))
    return max(1, math.ceil(num_blocks / cols)), cols


def grid_positions(num_blocks: int) -> np.ndarray:
    """[num_blocks, 2] (row, col) of each block."""
    _, cols = grid_shape(num_blocks)
    ids = np.arange(num_blocks)
    return np.stack([ids // cols, ids % cols], axis=1)


BACKGROUND: RGB = (20, 20, 20)
TEXT: RGB = (235, 235, 235)
FONT = cv2.FONT_HERSHEY_SIMPLEX


def draw_pool_image(pmap: PoolMap, grid_px: int = 480, title: str | None = None) -> np.ndarray:
    """HxWx3 uint8 RGB heatmap: a title with the counts, the block grid (about ``grid_px`` square; cells shrink
    for big pools, down to one pixel) and a legend of states and tasks with their block counts."""
    rows, cols = grid_shape(pmap.num_blocks)
    cell = max(1, min(24, grid_px // max(rows, cols)))
    gap = 1 if cell >= 4 else 0
    cells = np.zeros((rows * cols, 3), dtype=np.uint8)
    cells[: pmap.num_blocks] = pmap.colours()
    cells[pmap.num_blocks :] = BACKGROUND
    grid = np.repeat(np.repeat(cells.reshape(rows, cols, 3), cell, axis=0), cell, axis=1)
    if gap:
        grid[cell - gap :: cell, :] = BACKGROUND
        grid[:, cell - gap :: cell] = BACKGROUND

    legend = pmap.legend()
    title = title or pmap.summary()
    margin, title_h, line_h, legend_w = 12, 34, 22, 260
    (title_w, _), _ = cv2.getTextSize(title, FONT, 0.5, 1)
    height = title_h + max(grid.shape[0], line_h * len(legend)) + 2 * margin
    width = max(margin + grid.shape[1] + margin + legend_w, title_w + 2 * margin)
    image = np.full((height, width, 3), BACKGROUND, dtype=np.uint8)
    cv2.putText(image, title, (margin, 24), FONT, 0.5, TEXT, 1, cv2.LINE_AA)
    top = title_h + margin
    image[top : top + grid.shape[0], margin : margin + grid.shape[1]] = grid
    x = 2 * margin + grid.shape[1]
    for i, entry in enumerate(legend):
        y = top + i * line_h
        cv2.rectangle(image, (x, y), (x + 14, y + 14), entry.colour, thickness=-1)
        cv2.putText(image, f"{entry.label} ({entry.count})", (x + 22, y + 12), FONT, 0.45, TEXT, 1, cv2.LINE_AA)
    return image
