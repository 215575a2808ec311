"""Tiny random pi0 checkpoints built offline with transformers' PI0ForConditionalGeneration, and its inputs.

Shapes keep what matters to the pool and the mixture (1 KV head, head_dim 32 shared by backbone and expert, 2
layers each) at CPU size.  transformers initialises norm weights and biases to 0 and the rest with std 0.02; here
every weight is drawn with std 0.2 and every norm / bias with std 0.1, so (1 + w) norms, biases and the prompt all
move the actions (a chunk that ignored the prefix would not pass the tests).  ``save_pretrained`` writes the
LeRobot key names itself (transformers 5 reverses its pi0 conversion mapping on save).
"""

from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers, trainers
from transformers import PI0Config, PI0ForConditionalGeneration

from oxygen_ros.models.tokenizer import Tokenizer

VOCAB, IMAGE_SIZE, PATCH = 300, 32, 8  # 16 image tokens per camera
CHUNK, STATE_DIM, ACTION_DIM, STEPS = 5, 6, 7, 4
INSTRUCTIONS = ["pick up the red block\n", "put the cup on the plate\n", "open the top drawer\n", "stack the blocks\n",
                "move the arm to the left\n", "push the button\n", "close the gripper slowly\n"]  # fmt: skip


def pi0_config() -> PI0Config:
    return PI0Config(
        vlm_config={
            "model_type": "paligemma", "image_token_id": VOCAB, "vocab_size": VOCAB, "projection_dim": 64,
            "text_config": {"model_type": "gemma", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
                            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": VOCAB},
            "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                              "patch_size": PATCH, "image_size": IMAGE_SIZE, "num_hidden_layers": 2,
                              "num_attention_heads": 2, "vision_use_head": False},
        },
        dit_config={"model_type": "gemma", "hidden_size": 48, "num_hidden_layers": 2, "intermediate_size": 96,
                    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32},
        chunk_size=CHUNK, max_state_dim=STATE_DIM, max_action_dim=ACTION_DIM, num_inference_steps=STEPS,
    )  # fmt: skip


def build_pi0(seed: int = 0) -> PI0ForConditionalGeneration:
    """A random PI0ForConditionalGeneration whose every parameter matters (see the module docstring)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = PI0ForConditionalGeneration(pi0_config()).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                flat = name.endswith("bias") or "norm" in name
                p.normal_(std=0.1 if flat else 0.2)
    return model


def write_folder(folder: Path, seed: int = 0) -> PI0ForConditionalGeneration:
    """``save_pretrained`` of ``build_pi0(seed)`` into ``folder``, with ``write_tokenizer``'s; returns the model."""
    model = build_pi0(seed)
    model.save_pretrained(folder)
    write_tokenizer(folder)
    return model


def served(folder: Path) -> dict:
    """The checkpoint written into ``folder``, and the inference node's parameters serving it as the instruction
    tests run it (a chunk every 0.3 s)."""
    write_folder(folder)
    return {"model": str(folder), "kv_cache_bytes": 32 << 20, "max_model_len": 512, "action_period_s": 0.3}


def write_tokenizer(folder: Path, texts: list[str] = INSTRUCTIONS) -> None:
    """A small SentencePiece-style BPE (Gemma's ids for <pad> <eos> <bos> <unk>, spaces as "▁", no prefix space),
    trained offline on ``texts`` (robot instructions), saved as tokenizer.json + tokenizer_config.json: what a pi0
    folder must carry in place of PaliGemma's 257k-token one, in its vocabulary of VOCAB ids."""
    backend = Backend(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    backend.decoder = decoders.Metaspace(prepend_scheme="never")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"],
                                  show_progress=False)  # fmt: skip
    backend.train_from_iterator(texts, trainer)
    Tokenizer(backend, None, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>").save_hf(folder)


def rewrite_tensors(folder: Path, rename) -> None:
    """Rewrite model.safetensors with each name ``rename(name)`` (None = drop the tensor)."""
    path = folder / "model.safetensors"
    tensors = {rename(n): t for n, t in load_file(path).items()}
    save_file({n: t.contiguous() for n, t in tensors.items() if n is not None}, path, metadata={"format": "pt"})


def camera(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)


def pixel_values(image: np.ndarray | None) -> torch.Tensor:
    """PI0ImageProcessor's normalisation (rescale 1/255, mean 0.5, std 0.5) of an image already at the model's size
    (the processor itself needs torchvision, not installed here); a missing camera is zeros, as the processor pads."""
    if image is None:
        return torch.zeros(3, IMAGE_SIZE, IMAGE_SIZE)
    return (torch.from_numpy(image).permute(2, 0, 1).float() / 255.0 - 0.5) / 0.5


def hf_inputs(cameras: list[list[np.ndarray | None]], prompts: list[list[int]], states: list[list[float]]) -> dict:
    """transformers' batch: per row the present cameras' image tokens then the prompt, right-padded, with the
    attention mask the processor returns; camera slots [B, slots] with missing ones masked."""
    tokens = IMAGE_SIZE // PATCH * (IMAGE_SIZE // PATCH)
    rows = [[VOCAB] * tokens * sum(c is not None for c in cams) + p for cams, p in zip(cameras, prompts)]
    width = max(len(r) for r in rows)
    return {
        "input_ids": torch.tensor([r + [0] * (width - len(r)) for r in rows]),
        "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
        "pixel_values": torch.stack([torch.stack([pixel_values(c) for c in cams]) for cams in cameras]),
        "pixel_attention_mask": torch.tensor([[c is not None for c in cams] for cams in cameras]),
        "state": torch.tensor([s + [0.0] * (STATE_DIM - len(s)) for s in states]),
    }
