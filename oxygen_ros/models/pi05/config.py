"""pi0.5 shapes: the real ones (``PI05_FULL``) and the CPU-sized ones derived from them by one fixed rule, here for
the causal-prompt approximation (``pi05-causal-full`` / ``pi05-causal-tiny``, see ``pi05/model.py``); the faithful
pi0.5 at random weights (``pi05_lerobot/config.py``) takes the same shapes.

The tiny shapes are never tuned: every width and MLP dim is the real one / 8, every depth / 3, and head counts, KV heads,
Gemma's head_dim 256, patch size, image size, token counts, action horizon and action dim are kept.  So the tiny model
has pi0.5's KV layout per layer (1 KV head x 256) and exactly its 868-token prefix, only fewer and narrower layers.
"""

from dataclasses import dataclass, replace

SMOLLM2_VOCAB_SIZE = 49152  # the tokenizer available offline; both configs use it (see Pi05Config.vocab_size)
PALIGEMMA_VOCAB_SIZE = 257152  # the real pi0.5 vocabulary, for when PaliGemma's tokenizer is wired in
WIDTH_DIVISOR = 8
DEPTH_DIVISOR = 3


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
    def head_dim(self) -> int:
        return self.backbone.head_dim


@dataclass(frozen=True)
class Pi05Config(BackbonePoolShape):
    """The whole VLA.  ``vocab_size`` is SmolLM2's 49152, not PaliGemma's 257152: PaliGemma's SentencePiece model is
    not available offline and the engine needs a tokenizer whose ids the embedding covers and whose decoder understands
    every id the LM head can emit.  Swap it with ``dataclasses.replace`` once the real tokenizer is wired in.
    """

    name: str
    vision: SiglipConfig
    backbone: GemmaConfig
    expert: GemmaConfig
    vocab_size: int = SMOLLM2_VOCAB_SIZE
    max_images: int = 3
    max_prompt_tokens: int = 100  # prompt (+ state tokens); openpi pads to this length, we never need to pad
    action_horizon: int = 10
    action_dim: int = 32
    num_denoise_steps: int = 10
    state_bins: int = 256  # pi0.5 discretises each state dim into 256 bins over [-1, 1]
    min_period: float = 4e-3  # of the action expert's sine-cosine time embedding (openpi's)
    max_period: float = 4.0

    def __post_init__(self) -> None:
        check_mixture(self.backbone, self.expert)
        # paged_attention reads single-token queries from the pool (decode path); expert K/V is never stored there.
        if self.action_horizon < 2:
            raise ValueError("action_horizon must be >= 2")

    @property
    def tokens_per_image(self) -> int:
        return self.vision.num_patches

    @property
    def image_token_id(self) -> int:
        """Placeholder id at image positions: one past the text vocabulary, like PaliGemma's ``<image>`` (257152).
        Image positions take SigLIP tokens, never an embedding row, so a stray lookup of this id fails loudly."""
        return self.vocab_size

    @property
    def max_prefix_len(self) -> int:
        return self.max_images * self.tokens_per_image + self.max_prompt_tokens



PI05_FULL = Pi05Config(
    name="pi05-causal-full",
    vision=SiglipConfig(hidden_size=1152, intermediate_size=4304, num_layers=27, num_heads=16),  # So400m/14
    backbone=GemmaConfig(hidden_size=2048, intermediate_size=16384, num_layers=18),  # Gemma 2B
    expert=GemmaConfig(hidden_size=1024, intermediate_size=4096, num_layers=18),  # Gemma 300M
)


def scale_down(cfg: Pi05Config, name: str) -> Pi05Config:
    """Widths and MLP dims / 8, depths / 3; everything else (heads, head_dim, token counts) unchanged."""

    def shrink(part: SiglipConfig | GemmaConfig) -> SiglipConfig | GemmaConfig:
        dims = (part.hidden_size, part.intermediate_size)
        if any(d % WIDTH_DIVISOR for d in dims) or part.num_layers % DEPTH_DIVISOR:
            raise ValueError(f"{part} does not divide by the scaling rule")
        return replace(
            part,
            hidden_size=part.hidden_size // WIDTH_DIVISOR,
            intermediate_size=part.intermediate_size // WIDTH_DIVISOR,
            num_layers=part.num_layers // DEPTH_DIVISOR,
        )

    return replace(cfg, name=name, vision=shrink(cfg.vision), backbone=shrink(cfg.backbone), expert=shrink(cfg.expert))


PI05_TINY = scale_down(PI05_FULL, "pi05-causal-tiny")
PI05_CONFIGS = {c.name: c for c in (PI05_TINY, PI05_FULL)}
