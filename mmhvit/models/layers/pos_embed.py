from typing import Tuple

import torch
import torch.nn.functional as F

from .windows import is_exporting


def resize_pos_map(pos: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """Resize a (1, C, h, w) position-embedding map to ``size`` (bicubic); unchanged if it fits."""
    # An exported graph must resize at every input size, the traced one included.
    if not is_exporting() and tuple(pos.shape[-2:]) == tuple(size):
        return pos
    return F.interpolate(pos, size=size, mode='bicubic', align_corners=False)
