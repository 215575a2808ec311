"""Idefics3's connector: pixel shuffle (scale_factor^2 neighbouring patches -> one token) + one linear projection
into the decoder's width.  Parameter names are transformers' (``modality_projection.proj``)."""

import torch
from torch import nn


def pixel_shuffle(x: torch.Tensor, scale_factor: int) -> torch.Tensor:
    """[N, side*side, D] -> [N, side*side / s^2, D * s^2], the same reshapes as transformers' Idefics3Connector, so
    every token gathers the same patches in the same channel order."""
    n, seq, dim = x.shape
    side, s = int(seq**0.5), scale_factor
    x = x.view(n, side, side // s, dim * s).permute(0, 2, 1, 3)
    x = x.reshape(n, side // s, side // s, dim * s * s).permute(0, 2, 1, 3)
    return x.reshape(n, seq // (s * s), dim * s * s)


class ModalityProjection(nn.Module):
    def __init__(self, in_width: int, out_width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_width, out_width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Idefics3Connector(nn.Module):
    def __init__(self, vision_width: int, scale_factor: int, text_width: int) -> None:
        super().__init__()
        self.scale_factor = scale_factor
        self.modality_projection = ModalityProjection(vision_width * scale_factor**2, text_width)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """[N, patches, vision width] -> [N, image_seq_len, text width]."""
        return self.modality_projection(pixel_shuffle(patches, self.scale_factor))
