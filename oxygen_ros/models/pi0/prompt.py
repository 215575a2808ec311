"""pi0's prompt: the text layout it was trained on, and PaliGemma's tokenizer, which pi0 checkpoints do not ship.

Layout: ``<bos>`` + text + ``"\n"``, after the image tokens.  transformers' PI0Processor renders
``f"{'<image>' * n}{bos_token}{text}\n"`` with ``add_bos_token`` off; LeRobot's pi0 processor appends "\n" to the
task and tokenizes it with PaliGemma's tokenizer, which prepends BOS: the same ids.  Both right-pad to 48 tokens and
mask the padding out of attention and positions, which computes what the unpadded prompt does, so we never pad
(longer prompts are refused).  openpi also strips the text and turns "_" into spaces; we take the text as given,
as transformers does.

Neither ``lerobot/pi0_base`` nor transformers' folder holds a tokenizer (LeRobot downloads PaliGemma's), so the
folder must carry one: ``tokenizer.json`` (+ ``tokenizer_config.json`` naming BOS and EOS).
"""

from pathlib import Path

from oxygen_ros.models.tokenizer import Tokenizer

TOKENIZER_SOURCE = "google/paligemma-3b-pt-224"  # the tokenizer LeRobot's pi0 and pi0.5 processors load


def encode_prompt(tokenizer: Tokenizer, text: str) -> list[int]:
    """The prompt's token ids in pi0's layout (see the module docstring)."""
    return [tokenizer.bos_token_id, *tokenizer.encode(text + "\n")]


def load_pi0_tokenizer(folder: Path, vocab_size: int) -> Tokenizer:
    """The folder's tokenizer; FileNotFoundError / ValueError naming the missing file or token."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: pi0 / pi0.5 checkpoints do not ship their tokenizer; copy "
                                f"tokenizer.json and tokenizer_config.json of {TOKENIZER_SOURCE} into {folder}")  # fmt: skip
    tokenizer = Tokenizer.from_hf_folder(folder)
    bos = tokenizer.bos_token_id
    if bos is None or bos >= vocab_size:
        raise ValueError(f"{folder / 'tokenizer_config.json'}: bos_token {tokenizer.special_tokens['bos_token']!r} "
                         f"is not a token id below the model's vocabulary of {vocab_size}")  # fmt: skip
    return tokenizer
