"""Rescaling a single-stride map to another stride: the simple feature pyramid of ViTDet."""
import math

import torch
import torch.nn as nn

from .norm import build_norm2d
from .pooling import pool_cells


def build_rescale(scale: float, channels: int, norm_cfg: dict) -> nn.Module:
    """A module that rescales an NCHW map by ``scale`` (a power of two), keeping its channels.

    Up by 2^n: n 2x2 stride-2 transposed convs with norm + GELU between; 1: identity; down by
    2^n: 2^n x 2^n max-pool (ceil mode: a side of n pixels gives ceil(n / 2^n), as strided convs
    do). (`ViTDet <https://arxiv.org/abs/2203.16527>`_; mmseg's ``Feature2Pyramid`` has the same
    shape.)
    """
    steps = math.log2(scale) if scale > 0 else 0.5
    if steps != int(steps):
        raise ValueError(f'rescale {scale} is not supported; use a power of two (4, 2, 1, 0.5, '
                         '...)')
    steps = int(steps)
    if steps == 0:
        return nn.Identity()
    if steps < 0:
        return MaxPoolCells(2**-steps)
    layers = [nn.ConvTranspose2d(channels, channels, 2, 2)]
    for _ in range(steps - 1):
        layers += [build_norm2d(norm_cfg, channels), nn.GELU(),
                   nn.ConvTranspose2d(channels, channels, 2, 2)]
    return layers[0] if steps == 1 else nn.Sequential(*layers)


class MaxPoolCells(nn.Module):
    """``nn.MaxPool2d(cell, cell, ceil_mode=True)`` through :func:`pool_cells`, which takes an
    export-friendly form (no ceil mode) while the model is traced for export."""

    def __init__(self, cell: int):
        super().__init__()
        self.cell = cell

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pool_cells(x, self.cell, 'max')
