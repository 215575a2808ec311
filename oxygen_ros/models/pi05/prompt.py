"""pi0.5's prompt: the task and the discretized robot state as text, in the layout LeRobot's pi0.5 processor
(``Pi05PrepareStateTokenizerProcessorStep`` + PaliGemma's tokenizer) and openpi's ``PaligemmaTokenizer`` produce.

* state (already normalised to about [-1, 1]) -> ``np.digitize(state, np.linspace(-1, 1, 257)[:-1]) - 1`` per dim,
  on the float32 values LeRobot holds; there is no clipping, so a value below -1 gives -1 and one at or above 1
  gives 255.
* text: ``f"Task: {task}, State: {' '.join(bins)};\\nAction: "``, the task stripped with "_" and newlines as spaces.
* ids: ``<bos>`` + the tokenized text (PaliGemma's tokenizer adds BOS, no EOS); LeRobot right-pads to 200 tokens and
  masks the padding out, which computes what the unpadded prompt does, so we never pad.
"""

from collections.abc import Sequence

import numpy as np

from oxygen_ros.models.tokenizer import Tokenizer

STATE_BINS = 256


def discretize_state(state: np.ndarray | Sequence[float]) -> np.ndarray:
    """A normalised state -> int64 bin per dim (see the module docstring); ValueError unless 1-D, non-empty, finite."""
    values = np.asarray(state, dtype=np.float32)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"state must be a non-empty 1-D vector, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError("state contains NaN or infinite values")
    return (np.digitize(values, bins=np.linspace(-1, 1, STATE_BINS + 1)[:-1]) - 1).astype(np.int64)


def format_prompt(task: str, state: np.ndarray | Sequence[float]) -> str:
    """The prompt text of one observation, exactly as LeRobot writes it."""
    cleaned = task.strip().replace("_", " ").replace("\n", " ")
    return f"Task: {cleaned}, State: {' '.join(map(str, discretize_state(state)))};\nAction: "


def encode_prompt(tokenizer: Tokenizer, task: str, state: np.ndarray | Sequence[float]) -> list[int]:
    """The prompt's token ids: ``<bos>`` + ``format_prompt(task, state)`` tokenized."""
    return [tokenizer.bos_token_id, *tokenizer.encode(format_prompt(task, state))]


def clipped_state_bins(state: np.ndarray | Sequence[float], bins: int) -> np.ndarray:
    """The causal variant's state tokenisation: each dim clipped to [-1, 1] (openpi normalises state to about that
    range) and bucketed into ``bins`` equal bins -> int64 [len(state)] in [0, bins)."""
    values = np.asarray(state, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"state must be a non-empty 1-D vector, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError("state contains NaN or infinite values")
    edges = np.linspace(-1.0, 1.0, bins + 1)[:-1]
    return (np.digitize(np.clip(values, -1.0, 1.0), edges) - 1).astype(np.int64)
