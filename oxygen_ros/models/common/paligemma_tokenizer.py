"""PaliGemma's tokenizer, which pi0 and pi0.5 checkpoints do not ship (LeRobot downloads it): the folder must carry
``tokenizer.json`` (+ ``tokenizer_config.json`` naming BOS and EOS)."""

from pathlib import Path

from oxygen_ros.models.tokenizer import Tokenizer

TOKENIZER_SOURCE = "google/paligemma-3b-pt-224"  # the tokenizer LeRobot's pi0 and pi0.5 processors load


def load_paligemma_tokenizer(folder: Path, vocab_size: int) -> Tokenizer:
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
