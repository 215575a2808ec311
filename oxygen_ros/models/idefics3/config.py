"""What an Idefics3 / SmolVLM folder says about its networks and its image processor, validated field by field.

Every refusal is a ValueError that names the file and the field, so a user pointing the node at a folder we cannot
serve learns what to change at configure, not at the first image.
"""

from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.hf_loader import read_llama_args
from oxygen_ros.models.common.json_config import config_field, read_json, read_siglip_config
from oxygen_ros.models.common.vla_config import SiglipConfig

ARCHITECTURES = ("Idefics3ForConditionalGeneration", "SmolVLMForConditionalGeneration")
_MODEL_TYPES = ("idefics3", "smolvlm")
MAX_IMAGE_SIDE = 4096  # transformers' cap on the resized image (its MAX_IMAGE_SIZE)
_RESAMPLE = {int(f): f.name for f in Image.Resampling}  # transformers writes PIL's filter codes (1 = LANCZOS)


@dataclass(frozen=True)
class ImageProcessing:
    """The settings of transformers' Idefics3ImageProcessor that change pixel values or the tile layout."""

    tile_size: int  # max_image_size.longest_edge: side of every square tile the encoder sees
    longest_edge: int | None  # size.longest_edge of the first resize; None = do_resize off
    split: bool  # do_image_splitting: a grid of tiles plus the global image, else one squashed tile
    resample: int  # PIL filter code
    rescale_factor: float | None  # None = do_rescale off
    mean: tuple[float, float, float] | None  # None = do_normalize off
    std: tuple[float, float, float] | None

    @property
    def max_tiles(self) -> int:
        """Most tiles one image can become: the grid of the first resize's longest edge, plus the global image."""
        if not self.split:
            return 1
        side = -(-(self.longest_edge or MAX_IMAGE_SIDE) // self.tile_size)
        return side * side + 1


@dataclass(frozen=True)
class Idefics3Config:
    """SigLIP-like vision tower + pixel-shuffle connector + Llama decoder, and how images become tokens."""

    vision: SiglipConfig
    text: LlamaArgs
    scale_factor: int
    image_token_id: int
    processing: ImageProcessing

    @property
    def image_seq_len(self) -> int:
        """Image tokens per tile: the patch grid, shrunk by the pixel shuffle in each direction."""
        side = self.vision.image_size // self.vision.patch_size // self.scale_factor
        return side * side


def is_idefics3_config(config: dict) -> bool:
    """True for config.json of an Idefics3 or SmolVLM model (the two share weights' names and code)."""
    return config.get("model_type") in _MODEL_TYPES or any(a in ARCHITECTURES for a in config.get("architectures") or [])


def _processor_settings(folder: Path) -> tuple[dict, str]:
    """The image processor's settings: preprocessor_config.json (Hub folders) or, as transformers 5 saves them,
    the "image_processor" entry of processor_config.json."""
    if (folder / "preprocessor_config.json").is_file():
        return read_json(folder / "preprocessor_config.json"), "preprocessor_config.json"
    if (folder / "processor_config.json").is_file():
        nested = read_json(folder / "processor_config.json").get("image_processor")
        if isinstance(nested, dict):
            return nested, "processor_config.json image_processor"
    raise FileNotFoundError(f"{folder} has no preprocessor_config.json (nor an image_processor in processor_config.json)")


def _edge(data: dict, key: str, source: str) -> int:
    value = data.get(key)
    if not isinstance(value, dict) or not isinstance(value.get("longest_edge"), int) or value["longest_edge"] <= 0:
        raise ValueError(f"{source}: field {key!r} must be {{'longest_edge': <positive int>}}, got {value!r}")
    return value["longest_edge"]


def _triple(data: dict, key: str, source: str) -> tuple[float, float, float]:
    value = data.get(key)
    if isinstance(value, (int, float)):
        value = [value] * 3
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) for v in value)):
        raise ValueError(f"{source}: field {key!r} must be three numbers, got {value!r}")
    if key == "image_std" and any(v == 0 for v in value):
        raise ValueError(f"{source}: field 'image_std' must not contain 0")
    return (float(value[0]), float(value[1]), float(value[2]))


def _processing(folder: Path, tile_size: int) -> ImageProcessing:
    data, source = _processor_settings(folder)
    processor_type = data.get("image_processor_type", "")
    if processor_type.removesuffix("Pil") not in ("Idefics3ImageProcessor", "SmolVLMImageProcessor"):
        raise ValueError(f"{source}: field 'image_processor_type' {processor_type!r} is not an Idefics3/SmolVLM one")
    if _edge(data, "max_image_size", source) != tile_size:
        raise ValueError(
            f"{source}: field 'max_image_size' longest_edge {data['max_image_size']['longest_edge']} differs from "
            f"config.json vision_config.image_size {tile_size}: tiles must be the encoder's image size"
        )
    resample = data.get("resample", int(Image.Resampling.LANCZOS))
    if resample not in _RESAMPLE:
        raise ValueError(f"{source}: field 'resample' {resample!r} is not a PIL filter ({_RESAMPLE})")
    return ImageProcessing(
        tile_size=tile_size,
        longest_edge=_edge(data, "size", source) if data.get("do_resize", True) else None,
        split=bool(data.get("do_image_splitting", True)),
        resample=resample,
        rescale_factor=float(data.get("rescale_factor", 1 / 255)) if data.get("do_rescale", True) else None,
        mean=_triple(data, "image_mean", source) if data.get("do_normalize", True) else None,
        std=_triple(data, "image_std", source) if data.get("do_normalize", True) else None,
    )


def _check_image_seq_len(folder: Path, expected: int) -> None:
    """processor_config.json's image_seq_len drives transformers' prompt expansion: it must match the connector."""
    path = folder / "processor_config.json"
    if path.is_file():
        value = read_json(path).get("image_seq_len", expected)
        if value != expected:
            raise ValueError(
                f"{path}: field 'image_seq_len' {value!r} differs from the {expected} tokens per tile that "
                f"config.json's vision_config (image_size / patch_size) and scale_factor give"
            )


def read_idefics3_config(folder: Path) -> Idefics3Config:
    """Parse and cross-check config.json and the processor files; ValueError / FileNotFoundError say what is wrong."""
    source = str(folder / "config.json")
    config = read_json(folder / "config.json")
    if not is_idefics3_config(config):
        raise ValueError(f"{source}: field 'architectures' must name one of {list(ARCHITECTURES)}")
    vision = read_siglip_config(config, source)
    scale = config_field(config, "scale_factor", source)
    side = vision.image_size // vision.patch_size
    if scale <= 0 or side % scale:
        raise ValueError(f"{source}: field 'scale_factor' {scale} must divide the {side}-patch side of a tile")
    text_config = config.get("text_config")
    if not isinstance(text_config, dict):
        raise ValueError(f"{source}: field 'text_config' is missing")  # noqa: TRY004
    text_config = {"model_type": "llama"} | text_config  # older Idefics3 configs leave the Llama default implicit
    if text_config["model_type"] != "llama":
        raise ValueError(f"{source}: field 'text_config.model_type' {text_config['model_type']!r} is not llama")
    text = read_llama_args(text_config, Path(f"{source} text_config"))
    cfg = Idefics3Config(vision, text, scale, config_field(config, "image_token_id", source), _processing(folder, vision.image_size))
    if not 0 <= cfg.image_token_id < text.vocab_size:
        raise ValueError(f"{source}: field 'image_token_id' {cfg.image_token_id} is outside the text vocabulary")
    _check_image_seq_len(folder, cfg.image_seq_len)
    return cfg
