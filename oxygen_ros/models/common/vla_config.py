"""The shapes a SigLIP + Gemma VLA is made of (pi0, pi0.5, and Idefics3's SigLIP tower): one place the model
packages read them from, never from each other."""

from dataclasses import dataclass

SMOLLM2_VOCAB_SIZE = 49152  # the tokenizer available offline: the random-weight VLAs' vocabulary
PALIGEMMA_VOCAB_SIZE = 257152  # the real pi0 / pi0.5 vocabulary (a checkpoint folder's tokenizer)
WIDTH_DIVISOR = 8  # the tiny shapes' rule (pi05/config.py scale_down): widths / 8, depths / 3
DEPTH_DIVISOR = 3
CAMERA_SLOTS = 3  # openpi's pi0: base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb
PROMPT_TOKENS = 48  # openpi / LeRobot tokenizer_max_length for pi0


@dataclass(frozen=True)
class SiglipConfig:
    """SigLIP vision tower (pre-LN ViT); head_dim is width / heads, as in transformers' SiglipVisionModel."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    patch_size: int = 14
    image_size: int = 224
    layer_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class GemmaConfig:
    """One Gemma transformer of the mixture (the backbone or the action expert)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int = 8
    num_kv_heads: int = 1
    head_dim: int = 256
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6


def check_mixture(backbone: GemmaConfig, expert: GemmaConfig) -> None:
    """The expert attends to the backbone's K/V layer by layer (a Mixture-of-Transformers), so both must have the
    same depth, heads, KV heads and head_dim; ValueError otherwise."""

    def layout(g: GemmaConfig) -> tuple[int, int, int, int]:
        return g.num_layers, g.num_heads, g.num_kv_heads, g.head_dim

    if layout(backbone) != layout(expert):
        raise ValueError(
            f"the action expert (layers, heads, KV heads, head_dim) {layout(expert)} must equal the backbone's "
            f"{layout(backbone)}"
        )


class BackbonePoolShape:
    """The KV pool's shape of a model whose pool holds its ``backbone``'s layers, named like LlamaArgs so the engine
    sizes the pool the same way for every model."""

    backbone: GemmaConfig

    @property
    def num_layers(self) -> int:
        return self.backbone.num_layers

    @property
    def num_kv_heads(self) -> int:
        return self.backbone.num_kv_heads

    @property
    def num_heads(self) -> int:
        return self.backbone.num_heads

    @property
    def head_dim(self) -> int:
        return self.backbone.head_dim


# openpi's shapes (gemma.get_config, the So400m/14 tower): PaliGemma's SigLIP, its Gemma 2B, the 300M action expert
SO400M = SiglipConfig(hidden_size=1152, intermediate_size=4304, num_layers=27, num_heads=16)
GEMMA_2B = GemmaConfig(hidden_size=2048, intermediate_size=16384, num_layers=18)
GEMMA_300M = GemmaConfig(hidden_size=1024, intermediate_size=4096, num_layers=18)


@dataclass(frozen=True)
class VlaConfig(BackbonePoolShape):
    """The whole VLA, pi0 and pi0.5 alike: PaliGemma (``vision`` + ``backbone``), the action ``expert`` and the flow.
    ``causal_prompt`` is pi0.5's causal variant (``pi05-causal-*``): only the images are bidirectional and the state is
    reserved token ids, so image blocks are shared across prompts (an approximation, see models/pi05)."""

    vision: SiglipConfig
    backbone: GemmaConfig
    expert: GemmaConfig
    vocab_size: int
    action_horizon: int = 50  # chunk_size
    state_dim: int = 32  # max_state_dim: shorter robot states are zero-padded
    action_dim: int = 32  # max_action_dim: the expert's width of an action, noise drawn at it
    robot_action_dim: int = 0  # LeRobot's output_features.action.shape[0]: the chunk is cut to it; 0 = action_dim
    num_denoise_steps: int = 10  # num_inference_steps
    min_period: float = 4e-3  # of the sine-cosine time embedding
    max_period: float = 4.0
    max_images: int = CAMERA_SLOTS  # camera slots; a missing camera contributes no tokens
    camera_keys: tuple[str, ...] = ()  # a LeRobot checkpoint's image keys in its slot order; () = images in order
    max_prompt_tokens: int = PROMPT_TOKENS  # openpi pads the prompt to this; we never pad, but refuse longer
    name: str = ""  # a registered name (pi05-random-*, pi05-causal-*); "" for a checkpoint folder's
    causal_prompt: bool = False
    state_bins: int = 256  # pi0.5 discretises each state dim into 256 bins

    def __post_init__(self) -> None:
        check_mixture(self.backbone, self.expert)
        if self.action_horizon < 2:  # paged_attention reads single-token queries as a decode step
            raise ValueError("action_horizon must be >= 2")

    @property
    def max_prefix_len(self) -> int:
        return self.max_images * self.tokens_per_image + self.max_prompt_tokens

    @property
    def output_action_dim(self) -> int:
        """Action dims of a chunk as the robot takes it (LeRobot cuts the padded chunk to these)."""
        return self.robot_action_dim or self.action_dim

    @property
    def tokens_per_image(self) -> int:
        return self.vision.num_patches

    @property
    def image_token_id(self) -> int:
        """Placeholder id at image positions, one past the vocabulary like PaliGemma's ``<image>`` (257152)."""
        return self.vocab_size

    @property
    def state_token_id(self) -> int:
        """Placeholder id of the state token that ends a prefix in the pool (its K/V comes from the action expert)."""
        return self.vocab_size + 1
