"""pi0.5 configs (real shapes, the scaling rule) and input preprocessing; nothing here builds a model in memory."""

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
import torch
import transformers

from oxygen_ros.models.common.images import image_content_hash, preprocess_images
from oxygen_ros.models.common.vla_config import SMOLLM2_VOCAB_SIZE, GemmaConfig, SiglipConfig
from oxygen_ros.models.pi05 import PI05_FULL, PI05_TINY, Pi05Model, parameter_counts
from oxygen_ros.models.pi05.config import scale_down
from oxygen_ros.models.pi05.prompt import clipped_state_bins

GEMMA_2B_PARAMETERS = 2_506_172_416  # published count of google/gemma-2b (vocab 256000)


def test_full_config_has_real_pi05_shapes() -> None:
    assert PI05_FULL.vision == SiglipConfig(
        hidden_size=1152, intermediate_size=4304, num_layers=27, num_heads=16, patch_size=14, image_size=224
    )
    assert PI05_FULL.backbone == GemmaConfig(
        hidden_size=2048, intermediate_size=16384, num_layers=18, num_heads=8, num_kv_heads=1, head_dim=256
    )
    assert PI05_FULL.expert == GemmaConfig(
        hidden_size=1024, intermediate_size=4096, num_layers=18, num_heads=8, num_kv_heads=1, head_dim=256
    )
    assert (PI05_FULL.tokens_per_image, PI05_FULL.max_images, PI05_FULL.max_prompt_tokens) == (256, 3, 100)
    assert PI05_FULL.max_prefix_len == 868
    assert (PI05_FULL.action_horizon, PI05_FULL.action_dim, PI05_FULL.num_denoise_steps) == (10, 32, 10)
    assert PI05_FULL.vocab_size == SMOLLM2_VOCAB_SIZE


def test_tiny_config_is_the_fixed_scaling_rule() -> None:
    assert scale_down(PI05_FULL, "pi05-causal-tiny") == PI05_TINY
    assert PI05_TINY.vision == SiglipConfig(hidden_size=144, intermediate_size=538, num_layers=9, num_heads=16)
    assert PI05_TINY.vision.head_dim == 9  # width / heads, as transformers' SigLIP requires
    assert PI05_TINY.backbone == GemmaConfig(
        hidden_size=256, intermediate_size=2048, num_layers=6, num_heads=8, num_kv_heads=1, head_dim=256
    )
    assert PI05_TINY.expert == GemmaConfig(hidden_size=128, intermediate_size=512, num_layers=6)
    assert PI05_TINY.max_prefix_len == 868 and PI05_TINY.action_horizon == 10 and PI05_TINY.action_dim == 32


def test_full_model_parameters_have_transformers_shapes() -> None:
    """pi05-causal-full's tower and backbone, built on the meta device, have exactly the parameter shapes transformers gives
    SigLIP So400m/14 and Gemma 2B; with Gemma's own vocabulary the backbone has Gemma 2B's published size."""
    v, b = PI05_FULL.vision, PI05_FULL.backbone
    with torch.device("meta"):
        ours = Pi05Model(replace(PI05_FULL, vocab_size=256000))
        hf_vision = transformers.SiglipVisionModel(
            transformers.SiglipVisionConfig(
                hidden_size=v.hidden_size,
                intermediate_size=v.intermediate_size,
                num_hidden_layers=v.num_layers,
                num_attention_heads=v.num_heads,
                patch_size=v.patch_size,
                image_size=v.image_size,
                vision_use_head=False,
            )
        )
        hf_gemma = transformers.GemmaModel(
            transformers.GemmaConfig(
                vocab_size=256000,
                hidden_size=b.hidden_size,
                intermediate_size=b.intermediate_size,
                num_hidden_layers=b.num_layers,
                num_attention_heads=b.num_heads,
                num_key_value_heads=b.num_kv_heads,
                head_dim=b.head_dim,
            )
        )

    def shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
        return {name: tuple(p.shape) for name, p in module.state_dict().items()}

    assert shapes(ours.image_encoder.vision_model) == shapes(hf_vision)
    assert shapes(ours.backbone) == shapes(hf_gemma)
    assert sum(p.numel() for p in ours.backbone.parameters()) == GEMMA_2B_PARAMETERS


def test_parameter_counts_of_both_sizes(record_property: Callable[[str, object], None]) -> None:
    tiny, full = parameter_counts(PI05_TINY), parameter_counts(PI05_FULL)
    record_property("pi05_tiny_parameters", tiny)
    record_property("pi05_full_parameters", full)
    print(f"pi05-causal-tiny parameters: {tiny}\npi05-causal-full parameters: {full}")
    assert tiny["total"] == sum(tiny[k] for k in ("image_encoder", "backbone", "expert"))
    assert 36e6 < tiny["total"] < 38e6  # ~13 M of it is the 49152 x 256 embedding
    assert 2.9e9 < full["total"] < 3.0e9  # ~3.35 B with PaliGemma's 257152-token vocabulary, as pi0.5


def camera(seed: int, shape: tuple[int, int] = (96, 128)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)


def test_images_are_resized_with_padding_and_normalised() -> None:
    white = np.full((100, 200, 3), 255, dtype=np.uint8)
    (pixels,) = preprocess_images([white])
    assert pixels.shape == (3, 224, 224) and pixels.dtype == torch.float32
    # aspect ratio kept: 200x100 -> 224x112 centred, black (-1) bands of 56 rows above and below
    assert torch.all(pixels[:, 56:168] == 1.0)
    assert torch.all(pixels[:, :56] == -1.0) and torch.all(pixels[:, 168:] == -1.0)
    image = camera(0, (224, 224))  # already the right size: only normalisation
    expected = torch.from_numpy(image).permute(2, 0, 1).float() / 127.5 - 1.0
    torch.testing.assert_close(preprocess_images([image])[0], expected)
    torch.testing.assert_close(preprocess_images([image.astype(np.float32) / 255.0])[0], expected)


@pytest.mark.parametrize(
    ("images", "message"),
    [
        ([camera(0).astype(np.int16)], "dtype int16 not supported"),
        ([camera(0)[..., :1]], r"HxWx3"),
        ([np.zeros((4, 4, 4), dtype=np.uint8)], r"HxWx3"),
        ([np.zeros((4, 4), dtype=np.uint8)], r"HxWx3"),
        ([np.zeros((0, 10, 3), dtype=np.uint8)], "empty"),
        ([np.full((4, 4, 3), np.nan, dtype=np.float32)], "NaN"),
        ([np.full((4, 4, 3), 2.0, dtype=np.float32)], r"\[0, 1\]"),
        ([[[0, 0, 0]]], "numpy array"),
        ([camera(i) for i in range(4)], "at most 3 images"),
    ],
)
def test_bad_images_are_rejected_clearly(images: list[np.ndarray], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        preprocess_images(images)


def test_content_hash_follows_pixels_shape_and_dtype() -> None:
    image = camera(0)
    assert image_content_hash(image) == image_content_hash(image.copy())
    changed = image.copy()
    changed[0, 0, 0] ^= 1
    assert image_content_hash(changed) != image_content_hash(image)
    assert image_content_hash(image.reshape(128, 96, 3)) != image_content_hash(image)
    assert image_content_hash(image.view(np.int8)) != image_content_hash(image)


def test_state_is_discretised_into_256_bins_over_minus_one_one() -> None:
    assert clipped_state_bins([-1.0, -0.999, 0.0, 0.999, 1.0, 5.0, -5.0], 256).tolist() == [0, 0, 128, 255, 255, 255, 0]
    for bad in ([], [[0.0]], [float("nan")]):
        with pytest.raises(ValueError, match="state"):
            clipped_state_bins(bad, 256)


def test_old_names_are_refused_naming_the_new_ones() -> None:
    """``pi05-tiny`` / ``pi05-full`` made the prompt causal: refused, naming the approximation and the faithful
    random-weight model, so a stale config cannot silently run the approximation as "pi0.5"."""
    from oxygen_ros.errors import EngineError, ErrorCode
    from oxygen_ros.models.registry import load_model

    for old, new in (("pi05-tiny", "pi05-causal-tiny"), ("pi05-full", "pi05-causal-full")):
        with pytest.raises(EngineError) as err:
            load_model(old, torch.device("cpu"), torch.float32)
        assert err.value.code == ErrorCode.NOT_FOUND and repr(new) in err.value.message
        assert repr(old.replace("pi05-", "pi05-random-")) in err.value.message


def test_random_faithful_models_have_pi05_shapes() -> None:
    """``pi05-random-*``: the faithful model (``causal_prompt`` off) on the causal models' towers, pi0.5's chunk of 50."""
    from oxygen_ros.models.pi05 import RANDOM_CONFIGS

    full, tiny = RANDOM_CONFIGS["pi05-random-full"], RANDOM_CONFIGS["pi05-random-tiny"]
    assert (full.vision, full.backbone, full.expert) == (PI05_FULL.vision, PI05_FULL.backbone, PI05_FULL.expert)
    assert (tiny.vision, tiny.backbone, tiny.expert) == (PI05_TINY.vision, PI05_TINY.backbone, PI05_TINY.expert)
    assert (tiny.action_horizon, tiny.action_dim, tiny.num_denoise_steps, tiny.max_prompt_tokens) == (50, 32, 10, 200)
    assert tiny.vocab_size == SMOLLM2_VOCAB_SIZE
