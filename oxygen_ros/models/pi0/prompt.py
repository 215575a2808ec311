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


from oxygen_ros.models.tokenizer import Tokenizer


def encode_prompt(tokenizer: Tokenizer, text: str) -> list[int]:
    """The prompt's token ids in pi0's layout (see the module docstring)."""
    return [tokenizer.bos_token_id, *tokenizer.encode(text + "\n")]


