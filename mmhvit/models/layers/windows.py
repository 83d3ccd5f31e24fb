"""Padding to whole windows and the window (block) layout of token maps.

While a model is traced for export (:func:`~.export.is_exporting`), the helpers here never branch
on sizes, so one exported graph serves every input size.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .export import is_exporting


def ceil_div(size, divisor: int):
    """ceil(size / divisor) for ints and for sizes traced as tensors (``math.ceil`` would freeze
    a traced size into a constant)."""
    return (size + divisor - 1) // divisor


def fitted_window(size: int, height: int, width: int) -> Tuple[int, int]:
    """The window of side ``size`` on a ``height`` x ``width`` grid: a side shorter than the
    window gets one window of that side (the same result as padding it to a whole window with
    masked keys, without the wasted tokens); while exporting, always whole windows (no branch on
    traced sizes)."""
    if is_exporting():
        return size, size
    return min(size, height), min(size, width)


def padding_to_multiple(height: int, width: int, multiple_h: int,
                        multiple_w: Optional[int] = None) -> Tuple[int, int]:
    """Bottom and right padding that makes (height, width) whole multiples."""
    multiple_w = multiple_h if multiple_w is None else multiple_w
    # (m - n % m) % m rather than (-n) % m: the same ints, and traced sizes export it exactly.
    return ((multiple_h - height % multiple_h) % multiple_h,
            (multiple_w - width % multiple_w) % multiple_w)


def pad_nchw(x: torch.Tensor, pad_h: int, pad_w: int, value: float = 0.) -> torch.Tensor:
    """Pad an NCHW map at the bottom and right (zeros by default)."""
    if not is_exporting() and pad_h == 0 and pad_w == 0:
        return x
    return F.pad(x, (0, pad_w, 0, pad_h), value=value)


def pad_nhwc(x: torch.Tensor, pad_h: int, pad_w: int) -> torch.Tensor:
    """Zero-pad an NHWC map at the bottom and right."""
    if not is_exporting() and pad_h == 0 and pad_w == 0:
        return x
    return F.pad(x, (0, 0, 0, pad_w, 0, pad_h))


def window_partition(x: torch.Tensor, win_h: int, win_w: int) -> torch.Tensor:
    """(B, H, W, C) -> (B * nH * nW, win_h * win_w, C); windows and tokens in row-major order.

    H and W must be multiples of the window; images are the outer, windows the inner batch axis.
    """
    batch, height, width, channels = x.shape
    x = x.view(batch, height // win_h, win_h, width // win_w, win_w, channels)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, win_h * win_w, channels)


def window_reverse(windows: torch.Tensor, win_h: int, win_w: int, height: int,
                   width: int) -> torch.Tensor:
    """Inverse of :func:`window_partition`: (B * nH * nW, win_h * win_w, C) -> (B, H, W, C)."""
    channels = windows.shape[-1]
    rows, cols = height // win_h, width // win_w
    x = windows.view(-1, rows, cols, win_h, win_w, channels)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, height, width, channels)


def window_key_mask(height: int, width: int, pad_h: int, pad_w: int, win_h: int, win_w: int,
                    device: torch.device) -> Optional[torch.Tensor]:
    """Bool (nH * nW, win_h * win_w): True where a window token lies inside the unpadded map.

    Returns None when there is no padding, so callers keep SDPA's unmasked fast path; while
    exporting it always returns the mask, as the graph must serve padded sizes too.
    """
    if is_exporting():
        rows = torch.arange(height + pad_h, device=device) < height
        cols = torch.arange(width + pad_w, device=device) < width
        valid = (rows[:, None] & cols[None, :])[None, :, :, None]
        return window_partition(valid, win_h, win_w).squeeze(-1)
    if pad_h == 0 and pad_w == 0:
        return None
    valid = torch.zeros(1, height + pad_h, width + pad_w, 1, dtype=torch.bool, device=device)
    valid[:, :height, :width] = True
    return window_partition(valid, win_h, win_w).squeeze(-1)


def cls_window_key_masks(valid: Optional[torch.Tensor], count: int, tokens: int,
                         device: torch.device
                         ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Key masks of windows that each start with a copy of one class token.

    A class token that stays global in windowed attention is one more key of every window, and
    its own query attends to the keys of all windows at once. That query must see each real
    token once and its own key once: of the ``count`` copies of the class key it keeps the first
    window's, so that its softmax is the global one.

    Args:
        valid (Tensor, optional): Bool (count, tokens), True for real window tokens
            (:func:`window_key_mask`'s); None: no padding.
        count (int): Windows per image.
        tokens (int): Tokens per window, the class token not counted.
        device (torch.device): Where the masks are made.

    Returns:
        tuple: The windows' key mask, bool (count, 1 + tokens), and the class query's over all
        windows' keys, bool (1, count * (1 + tokens)); each None where no key is masked, which
        keeps SDPA's unmasked fast path.
    """
    padded = valid is not None
    if not padded:
        if count == 1:
            return None, None
        valid = torch.ones(count, tokens, dtype=torch.bool, device=device)
    first = (torch.arange(valid.shape[0], device=device) == 0)[:, None]
    window_mask = torch.cat([torch.ones_like(first), valid], dim=1) if padded else None
    return window_mask, torch.cat([first, valid], dim=1).reshape(1, -1)
