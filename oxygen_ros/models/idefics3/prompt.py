"""The text an ``<image>`` placeholder becomes, exactly as transformers' Idefics3Processor / SmolVLMProcessor writes
it: every tile is ``<fake_token_around_image>`` + a marker + ``image_seq_len`` x ``<image>``; grid rows end in a
newline and the global image closes the sequence.  The expanded text is then tokenized as a whole, like the
processor does, so the token ids are the processor's."""

IMAGE = "<image>"
FAKE = "<fake_token_around_image>"
GLOBAL = "<global-img>"


def image_text(rows: int, cols: int, image_seq_len: int) -> str:
    """What one image with a ``rows`` x ``cols`` grid (0 x 0: one tile) expands to."""
    tokens = IMAGE * image_seq_len
    grid = "".join("".join(f"{FAKE}<row_{r + 1}_col_{c + 1}>{tokens}" for c in range(cols)) + "\n" for r in range(rows))
    return grid + ("\n" if rows else "") + f"{FAKE}{GLOBAL}{tokens}{FAKE}"


def expand_images(text: str, grids: list[tuple[int, int]], image_seq_len: int) -> str:
    """``text`` with its i-th ``<image>`` replaced by image i's expansion; ValueError unless the counts agree."""
    parts = text.split(IMAGE)
    if len(parts) - 1 != len(grids):
        raise ValueError(f"the prompt has {len(parts) - 1} {IMAGE} placeholders for {len(grids)} images")
    out = [parts[0]]
    for (rows, cols), rest in zip(grids, parts[1:]):
        out += [image_text(rows, cols, image_seq_len), rest]
    return "".join(out)
