from typing import Tuple

import torch
import torch.nn.functional as F


def resize_pos_map(pos: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """Resize a (1, C, h, w) position-embedding map to ``size`` (bicubic); unchanged if it fits."""
    if tuple(pos.shape[-2:]) == tuple(size):
        return pos
    return F.interpolate(pos, size=size, mode='bicubic', align_corners=False)
