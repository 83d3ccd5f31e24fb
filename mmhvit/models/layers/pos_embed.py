from typing import Tuple

import torch
import torch.nn.functional as F

from .export import is_exporting

# PyTorch's bicubic kernel (Keys' cubic convolution, a = -0.75).
CUBIC_A = -0.75


def resize_pos_map(pos: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """Resize a (1, C, h, w) position-embedding map to ``size`` (bicubic); unchanged if it fits.

    While exporting, the same resize is two matrix products (:func:`bicubic_matrix`): ONNX
    Runtime's cubic ``Resize`` kernel took 30% of NesT-T's time at 800 x 1344.
    """
    if is_exporting():
        # An exported graph must resize at every input size, the traced one included.
        rows, cols = (bicubic_matrix(n_in, n_out, pos.dtype, pos.device)
                      for n_in, n_out in zip(pos.shape[-2:], size))
        return rows @ pos @ cols.transpose(0, 1)
    if tuple(pos.shape[-2:]) == tuple(size):
        return pos
    return F.interpolate(pos, size=size, mode='bicubic', align_corners=False)


def bicubic_matrix(n_in: int, n_out, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(n_out, n_in): one axis of ``F.interpolate(mode='bicubic', align_corners=False)`` as a
    matrix; ``n_out`` may be a size traced as a tensor. Source positions are half-pixel centred
    and not clamped, the four taps' indices are clamped to the border (PyTorch's rules)."""
    src = (torch.arange(n_out, device=device).to(dtype) + 0.5) * (n_in / n_out) - 0.5
    start = src.floor()
    t = (src - start)[:, None]
    weights = torch.cat([
        cubic_far(t + 1),
        cubic_near(t),
        cubic_near(1 - t),
        cubic_far(2 - t),
    ], dim=1)  # taps start - 1 .. start + 2
    taps = (start[:, None] + torch.arange(-1, 3, device=device).to(dtype)).clamp(0, n_in - 1)
    onehot = taps[:, :, None] == torch.arange(n_in, device=device).to(dtype)
    return (weights[:, :, None] * onehot.to(dtype)).sum(dim=1)


def cubic_near(x: torch.Tensor) -> torch.Tensor:
    """Keys' kernel for |x| <= 1."""
    return ((CUBIC_A + 2) * x - (CUBIC_A + 3)) * x * x + 1


def cubic_far(x: torch.Tensor) -> torch.Tensor:
    """Keys' kernel for 1 < |x| < 2."""
    return ((CUBIC_A * x - 5 * CUBIC_A) * x + 8 * CUBIC_A) * x - 4 * CUBIC_A
