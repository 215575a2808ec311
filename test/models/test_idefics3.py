"""Idefics3 / SmolVLM pieces against transformers: image preprocessing (bit-equal pixel values), vision encoder +
connector features, and clear refusals of folders we cannot serve."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from idefics3_folders import IMAGE_SEQ_LEN, image_processor_settings, random_image, write_folder
from safetensors.torch import load_file, save_file
from transformers import Idefics3ForConditionalGeneration
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.idefics3.loader import full_tile_position_ids, load_idefics3_folder
from oxygen_ros.models.idefics3.preprocess import preprocess_image
from oxygen_ros.models.registry import load_model

# (height, width): landscape, portrait, square, extreme strips, tiny, larger than size.longest_edge
SIZES = [(48, 64), (64, 48), (64, 64), (100, 37), (7, 300), (300, 9), (2, 2), (129, 130), (480, 640)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_folder(tmp_path_factory.mktemp("idefics3"))


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("longest_edge", [128, 100, 200])
@pytest.mark.parametrize("processor_cls", [Idefics3ImageProcessorPil, SmolVLMImageProcessorPil])
def test_preprocessing_equals_transformers(folder: Path, split: bool, longest_edge: int, processor_cls: type) -> None:
    settings = image_processor_settings(split) | {"size": {"longest_edge": longest_edge}}
    reference = processor_cls(**settings)
    ours = replace(load_idefics3_folder(folder)[0].config.processing, split=split, longest_edge=longest_edge)
    rng = np.random.default_rng(longest_edge)
    for height, width in SIZES:
        image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        theirs = reference(images=[image], return_tensors="pt", return_row_col_info=True)
        tiles = preprocess_image(image, ours)
        assert torch.equal(tiles.pixels, theirs["pixel_values"][0]), (height, width)  # bit-equal
        assert (tiles.rows, tiles.cols) == (theirs["rows"][0][0], theirs["cols"][0][0])


def test_position_ids_follow_transformers_bucketing() -> None:
    assert torch.equal(full_tile_position_ids(32), torch.arange(32 * 32))  # SmolVLM's 512 px / 16 px tiles
    odd = full_tile_position_ids(76)  # float rounding puts some patches in the previous bucket
    assert not torch.equal(odd, torch.arange(76 * 76)) and odd.max() < 76 * 76


def test_vision_features_equal_transformers(folder: Path) -> None:
    """Encoder + connector in fp32: bit-equal here (same ops in the same order); the bar is 1e-5 absolute."""
    model = load_idefics3_folder(folder)[0]
    reference = Idefics3ForConditionalGeneration.from_pretrained(folder).eval()
    rng = np.random.default_rng(1)
    for height, width in [(70, 90), (120, 50), (64, 64)]:
        tiles = preprocess_image(random_image(rng, height, width), model.config.processing)
        with torch.no_grad():
            ours = model.encode_images(tiles.pixels)
            theirs = reference.model.get_image_features(tiles.pixels[None]).pooler_output[0]
        assert ours.shape == (tiles.pixels.shape[0] * IMAGE_SEQ_LEN, 64)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
        assert theirs.abs().max() > 1.0  # not a vanishing signal


def test_loads_through_the_registry(folder: Path) -> None:
    bundle = load_model(str(folder), torch.device("cpu"), torch.float32)
    assert bundle.vision and not bundle.vla
    assert (bundle.num_layers, bundle.num_kv_heads, bundle.head_dim) == (2, 2, 16)
    assert bundle.model_id.startswith(folder.name + "@")
    assert bundle.tokenizer.eos_token_ids == [bundle.tokenizer.backend.token_to_id("<end_of_utterance>")]


def _edit_json(path: Path, change: dict) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | change))


def _edit_processor(folder: Path, change: dict) -> None:
    path = folder / "processor_config.json"
    config = json.loads(path.read_text())
    config["image_processor"] |= change
    path.write_text(json.dumps(config))


BAD_FOLDERS = [
    ("no config", lambda f: (f / "config.json").unlink(), "config.json"),
    ("no weights", lambda f: (f / "model.safetensors").unlink(), "model.safetensors"),
    ("no tokenizer", lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json"),
    ("no processor", lambda f: (f / "processor_config.json").unlink(), "preprocessor_config.json"),
    ("no template", lambda f: (f / "chat_template.jinja").unlink(), "chat template"),
    ("tile size", lambda f: _edit_processor(f, {"max_image_size": {"longest_edge": 32}}), "'max_image_size'"),
    ("processor type", lambda f: _edit_processor(f, {"image_processor_type": "CLIPImageProcessor"}),
     "'image_processor_type'"),
    ("seq len", lambda f: _edit_json(f / "processor_config.json", {"image_seq_len": 64}), "'image_seq_len'"),
    ("image token", lambda f: _edit_json(f / "config.json", {"image_token_id": 5}), "'image_token_id'"),
    ("scale", lambda f: _edit_json(f / "config.json", {"scale_factor": 3}), "'scale_factor'"),
    ("act", lambda f: _edit_json(f / "config.json", {"vision_config": json.loads((f / "config.json").read_text())[
        "vision_config"] | {"hidden_act": "relu"}}), "'hidden_act'"),
    ("text layers", lambda f: _edit_json(f / "config.json", {"text_config": json.loads((f / "config.json").read_text())[
        "text_config"] | {"num_hidden_layers": 3}}), "missing"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "damage", "named"), BAD_FOLDERS, ids=[b[0] for b in BAD_FOLDERS])
def test_bad_folder_is_refused_naming_file_and_field(folder: Path, tmp_path: Path, name: str, damage, named: str) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    damage(copy)
    with pytest.raises(EngineError) as caught:
        load_model(str(copy), torch.device("cpu"), torch.float32)
    assert caught.value.code in (ErrorCode.INVALID_ARGUMENT, ErrorCode.NOT_FOUND)
    assert named in caught.value.message, caught.value.message


def test_misshapen_tensor_is_refused(folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    tensors = load_file(copy / "model.safetensors")
    key = "model.connector.modality_projection.proj.weight"
    tensors[key] = tensors[key][:, :64].contiguous()
    save_file(tensors, copy / "model.safetensors")
    with pytest.raises(EngineError, match="model.safetensors: tensor shapes do not match") as caught:
        load_model(str(copy), torch.device("cpu"), torch.float32)
    assert key.removeprefix("model.") in caught.value.message
