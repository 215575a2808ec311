"""SigLIP vision tower (PaliGemma's image encoder) plus the linear projector into the backbone's width.

Parameter names and numerics are those of ``transformers.SiglipVisionModel`` (with ``vision_use_head=False``: PaliGemma
and pi0.5 keep all 256 patch tokens, no pooling head), so its state dict loads into ``SiglipVisionTransformer`` as is.
Images are independent here: attention is bidirectional within one image and never across images.
"""

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_ros.models.common.vla_config import SiglipConfig


class SiglipVisionEmbeddings(nn.Module):
    """Non-overlapping patch conv + one learned position embedding per patch."""

    def __init__(self, cfg: SiglipConfig) -> None:
        super().__init__()
        self.patch_embedding = nn.Conv2d(3, cfg.hidden_size, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.position_embedding = nn.Embedding(cfg.num_patches, cfg.hidden_size)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels [N, 3, S, S] in [-1, 1] -> [N, num_patches, width] (row-major patch order)."""
        x = self.patch_embedding(pixels.to(self.patch_embedding.weight.dtype)).flatten(2).transpose(1, 2)
        # contiguous: the transposed conv layout would otherwise propagate and make every later matmul copy
        return x.contiguous() + self.position_embedding.weight


class SiglipAttention(nn.Module):
    def __init__(self, cfg: SiglipConfig) -> None:
        super().__init__()
        self.num_heads, self.head_dim = cfg.num_heads, cfg.head_dim
        width = cfg.hidden_size
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, _ = x.shape
        shape = (n, t, self.num_heads, self.head_dim)
        q, k, v = (proj(x).view(shape).transpose(1, 2) for proj in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, scale=self.head_dim**-0.5)
        return self.out_proj(out.transpose(1, 2).reshape(n, t, -1))


class SiglipMLP(nn.Module):
    def __init__(self, cfg: SiglipConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class SiglipEncoderLayer(nn.Module):
    """Pre-LN transformer block."""

    def __init__(self, cfg: SiglipConfig) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.self_attn = SiglipAttention(cfg)
        self.layer_norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = SiglipMLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class SiglipEncoder(nn.Module):
    def __init__(self, cfg: SiglipConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(SiglipEncoderLayer(cfg) for _ in range(cfg.num_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class SiglipVisionTransformer(nn.Module):
    """Equivalent of ``SiglipVisionModel(...).last_hidden_state`` (same parameter names)."""

    def __init__(self, cfg: SiglipConfig) -> None:
        super().__init__()
        self.embeddings = SiglipVisionEmbeddings(cfg)
        self.encoder = SiglipEncoder(cfg)
        self.post_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """[N, 3, S, S] -> [N, num_patches, width]."""
        return self.post_layernorm(self.encoder(self.embeddings(pixels)))


class ImageEncoder(nn.Module):
    """Vision tower + PaliGemma's ``multi_modal_projector``: images -> backbone-width tokens.

    The projected tokens are NOT multiplied by sqrt(width) (HF PaliGemma divides by it before Gemma multiplies; openpi
    never scales them), unlike text embeddings.
    """

    def __init__(self, cfg: SiglipConfig, out_width: int) -> None:
        super().__init__()
        self.vision_model = SiglipVisionTransformer(cfg)
        self.projector = nn.Linear(cfg.hidden_size, out_width)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """[N, 3, S, S] -> [N * num_patches, out_width], images one after another."""
        return self.projector(self.vision_model(pixels)).flatten(0, 1)
