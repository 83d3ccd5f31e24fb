from typing import Tuple

import torch
import torch.nn.functional as F


def resize_pos_map(pos: torch.Tensor, size: Tuple[int, int], mode: str = 'bicubic') -> torch.Tensor:
    """Resize a (1, C, h, w) position-embedding map to ``size``; unchanged when it already fits."""
    if tuple(pos.shape[-2:]) == tuple(size):
        return pos
    return F.interpolate(pos, size=size, mode=mode, align_corners=False)
