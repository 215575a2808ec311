"""Tiny random Idefics3 / SmolVLM folders built offline with transformers, and transformers' greedy answers on them.

The tokenizer is SmolLM2's (from the packaged GGUF) plus the image special tokens SmolVLM's tokenizer has; the
chat template is SmolVLM-Instruct's.  Weights use initializer_range 0.3 so greedy output is not one token repeated.
An Idefics3 folder is written by transformers itself (``save_pretrained`` of the model and of an Idefics3Processor:
transformers 5 puts the image processor inside processor_config.json).  transformers' SmolVLMProcessor needs
num2words and torchvision, which are not installed, so a SmolVLM folder gets its processor files written as the
Hub ships them (preprocessor_config.json, processor_config.json, chat_template.json).
"""

import json
from pathlib import Path

import numpy as np
import torch
from gguf_files import smollm2_reader
from tokenizers import AddedToken
from transformers import (
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3Processor,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    SmolVLMConfig,
    SmolVLMForConditionalGeneration,
)
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from oxygen_ros.models.tokenizer import Tokenizer

CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] "
    "== 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == "
    "'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
    f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)
]
TILE, LONGEST_EDGE, IMAGE_SEQ_LEN = 64, 128, 16  # 8x8 patches of 8 px, pixel shuffle 2: 16 tokens per tile
VOCAB_SIZE = 49216  # SmolLM2's 49152 + the 40 image tokens, rounded up


def write_tokenizer(folder: Path) -> PreTrainedTokenizerFast:
    """SmolLM2's tokenizer + the image tokens into ``folder``; transformers' view of it for the processor."""
    tokenizer = Tokenizer.from_gguf_metadata(smollm2_reader())
    tokenizer.backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in IMAGE_TOKENS])
    tokenizer.save_hf(folder)
    return PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"), bos_token="<|im_start|>", eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
    )  # fmt: skip


def image_processor_settings(split: bool) -> dict:
    return {
        "do_image_splitting": split, "size": {"longest_edge": LONGEST_EDGE}, "max_image_size": {"longest_edge": TILE},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 1, "rescale_factor": 1 / 255,
    }  # fmt: skip


def _config(cls: type, image_token_id: int, eos_token_id: int, context: int) -> Idefics3Config | SmolVLMConfig:
    return cls(
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": TILE, "patch_size": 8, "initializer_range": 0.3},
        text_config={"model_type": "llama", "vocab_size": VOCAB_SIZE, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "max_position_embeddings": context, "rope_theta": 100000.0, "initializer_range": 0.3,
                     "tie_word_embeddings": False, "eos_token_id": eos_token_id},
        scale_factor=2, image_token_id=image_token_id, initializer_range=0.3,
    )  # fmt: skip


def write_folder(folder: Path, split: bool = True, smolvlm: bool = False, seed: int = 0, context: int = 2048) -> Path:
    """A tiny random Idefics3ForConditionalGeneration (or SmolVLMForConditionalGeneration) folder; ``context``: its
    text model's max_position_embeddings (a short one allows fewer images per prompt)."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    image_id, eos_id = (tokenizer.convert_tokens_to_ids(t) for t in ("<image>", "<end_of_utterance>"))
    cls, model_cls = (SmolVLMConfig, SmolVLMForConditionalGeneration) if smolvlm else (
        Idefics3Config, Idefics3ForConditionalGeneration)  # fmt: skip
    torch.manual_seed(seed)
    model_cls(_config(cls, image_id, eos_id, context)).eval().save_pretrained(folder)
    if smolvlm:
        settings = image_processor_settings(split) | {"image_processor_type": "SmolVLMImageProcessor"}
        (folder / "preprocessor_config.json").write_text(json.dumps(settings))
        (folder / "processor_config.json").write_text(json.dumps({"image_seq_len": IMAGE_SEQ_LEN}))
        (folder / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
        config = json.loads((folder / "tokenizer_config.json").read_text()) | {"chat_template": None}
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    else:
        processor = Idefics3Processor(Idefics3ImageProcessorPil(**image_processor_settings(split)), tokenizer,
                                      image_seq_len=IMAGE_SEQ_LEN, chat_template=CHAT_TEMPLATE)  # fmt: skip
        processor.save_pretrained(folder)
    return folder


def reference_processor(folder: Path, split: bool) -> Idefics3Processor:
    """transformers' processor for ``folder``'s settings (Idefics3's: SmolVLM's expands images the same way)."""
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), eos_token="<end_of_utterance>")
    return Idefics3Processor(Idefics3ImageProcessorPil(**image_processor_settings(split)), tokenizer,
                             image_seq_len=IMAGE_SEQ_LEN, chat_template=CHAT_TEMPLATE)  # fmt: skip


def user_turn(question: str, num_images: int) -> list[dict]:
    """The messages the engine builds for a chat request: the frames first, then the question."""
    content = [{"type": "image"} for _ in range(num_images)] + [{"type": "text", "text": question}]
    return [{"role": "user", "content": content}]


def processor_inputs(processor: Idefics3Processor, question: str, images: list[np.ndarray]) -> dict:
    text = processor.apply_chat_template(user_turn(question, len(images)), add_generation_prompt=True)
    return processor(text=[text], images=[images] if images else None, return_tensors="pt")


@torch.inference_mode()
def hf_greedy(model: PreTrainedModel, inputs: dict, max_new_tokens: int, eos_token_ids: list[int]) -> list[int]:
    """transformers' greedy continuation: only the new tokens, ending with EOS (included) if it was reached."""
    output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos_token_ids,
                            pad_token_id=eos_token_ids[0])  # fmt: skip
    return output[0, inputs["input_ids"].shape[1] :].tolist()


def random_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Smooth random colour blobs plus noise: an image whose tiles differ from each other."""
    coarse = rng.integers(0, 256, (max(2, height // 16), max(2, width // 16), 3)).astype(np.float64)
    ys, xs = np.linspace(0, coarse.shape[0] - 1, height).astype(int), np.linspace(0, coarse.shape[1] - 1, width).astype(int)
    noise = rng.normal(0, 20, (height, width, 3))
    return np.clip(coarse[ys][:, xs] + noise, 0, 255).astype(np.uint8)
