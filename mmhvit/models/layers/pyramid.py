"""Rescaling a single-stride map to another stride: the simple feature pyramid of ViTDet."""
import torch
import torch.nn as nn

from .norm import build_norm2d
from .pooling import pool_cells

RESCALES = (4, 2, 1, 0.5)


def build_rescale(scale: float, channels: int, norm_cfg: dict) -> nn.Module:
    """A module that rescales an NCHW map by ``scale``, keeping its channels.

    4: two 2x2 stride-2 transposed convs with norm + GELU between; 2: one transposed conv;
    1: identity; 0.5: 2x2 max-pool (ceil mode: an odd side gives ceil(n / 2), as strided convs do).
    (`ViTDet <https://arxiv.org/abs/2203.16527>`_; mmseg's ``Feature2Pyramid`` has the same shape.)
    """
    if scale == 4:
        return nn.Sequential(
            nn.ConvTranspose2d(channels, channels, 2, 2), build_norm2d(norm_cfg, channels),
            nn.GELU(), nn.ConvTranspose2d(channels, channels, 2, 2))
    if scale == 2:
        return nn.ConvTranspose2d(channels, channels, 2, 2)
    if scale == 1:
        return nn.Identity()
    if scale == 0.5:
        return HalfMaxPool()
    raise ValueError(f'rescale {scale} is not supported; use one of {RESCALES}')


class HalfMaxPool(nn.Module):
    """``nn.MaxPool2d(2, 2, ceil_mode=True)`` through :func:`pool_cells`, which takes an
    export-friendly form (no ceil mode) while the model is traced for export."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pool_cells(x, 2, 'max')
