"""A feature pyramid from the single-stride maps of an isotropic transformer (ViTDet)."""
from typing import Sequence

import torch.nn as nn

from .norm import build_norm2d


class SimplePyramid(nn.Module):
    """Rescale stride-s maps to strides s / scale: the simple feature pyramid of ViTDet.

    Scale 4: two 2x2 stride-2 transposed convs with norm + GELU between; 2: one transposed conv;
    1: identity; 0.5: 2x2 max-pool. Channels are kept, so every output has ``embed_dim`` channels.
    (`ViTDet <https://arxiv.org/abs/2203.16527>`_; mmseg's ``Feature2Pyramid`` has the same shape.)

    Args:
        embed_dim (int): Channels of the input maps.
        rescales (Sequence[float]): One scale per output, from {4, 2, 1, 0.5}.
        norm_cfg (dict): Norm between the two transposed convs of scale 4.
    """

    def __init__(self, embed_dim: int, rescales: Sequence[float] = (4, 2, 1, 0.5),
                 norm_cfg: dict = dict(type='LN2d', eps=1e-6)):
        super().__init__()
        self.rescales = tuple(rescales)
        ops = []
        for scale in self.rescales:
            if scale == 4:
                op = nn.Sequential(
                    nn.ConvTranspose2d(embed_dim, embed_dim, 2, 2), build_norm2d(norm_cfg, embed_dim),
                    nn.GELU(), nn.ConvTranspose2d(embed_dim, embed_dim, 2, 2))
            elif scale == 2:
                op = nn.ConvTranspose2d(embed_dim, embed_dim, 2, 2)
            elif scale == 1:
                op = nn.Identity()
            elif scale == 0.5:
                # ceil_mode keeps ceil(H / 2) rows for odd maps, as strided convs would.
                op = nn.MaxPool2d(2, 2, ceil_mode=True)
            else:
                raise ValueError(f'SimplePyramid: scale {scale} is not supported; use 4, 2, 1 or 0.5')
            ops.append(op)
        self.ops = nn.ModuleList(ops)

    def forward(self, maps):
        """Apply scale i to map i; ``maps`` has one NCHW map per scale."""
        if len(maps) != len(self.ops):
            raise ValueError(f'SimplePyramid expects {len(self.ops)} maps, got {len(maps)}')
        return [op(x) for op, x in zip(self.ops, maps)]
