"""Pooling cells of a map that need not be whole: H-MHSA's key pooling and merging, TransCNN's
downsample, the stride-32 step of TNT's pyramid."""
import torch
import torch.nn.functional as F

from .export import is_exporting
from .windows import pad_nchw, padding_to_multiple


def pool_cells(x: torch.Tensor, cell: int, mode: str) -> torch.Tensor:
    """Average or max of each ``cell`` x ``cell`` cell of an NCHW map; partial border cells pool
    only their valid pixels (ceil mode without padding), so no padding value enters a pooled token.

    Equals ``nn.AvgPool2d(cell, cell)`` / ``nn.MaxPool2d(cell, cell)`` when H and W are multiples
    of ``cell``.
    """
    if cell == 1:
        return x
    if is_exporting():
        return _export_pool_cells(x, cell, mode)
    # A map smaller than the cell is one partial cell: clip the kernel, keep the stride.
    kernel = (min(cell, x.shape[-2]), min(cell, x.shape[-1]))
    pool = F.avg_pool2d if mode == 'avg' else F.max_pool2d
    return pool(x, kernel, cell, ceil_mode=True)


def _export_pool_cells(x: torch.Tensor, cell: int, mode: str) -> torch.Tensor:
    """:func:`pool_cells` without ceil mode or a size-dependent kernel, for exported graphs:
    the map is padded to whole cells; max pads with the lowest finite value, average divides the
    cell sums by the number of valid pixels (an average pool of the padded validity map)."""
    pad_h, pad_w = padding_to_multiple(x.shape[-2], x.shape[-1], cell)
    if mode != 'avg':
        return F.max_pool2d(pad_nchw(x, pad_h, pad_w, torch.finfo(x.dtype).min), cell, cell)
    valid = pad_nchw(torch.ones_like(x[:1, :1]), pad_h, pad_w)
    return F.avg_pool2d(pad_nchw(x, pad_h, pad_w), cell, cell) / F.avg_pool2d(valid, cell, cell)
