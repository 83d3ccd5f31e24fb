"""The modules NesT stacks: the patch embedding, the block aggregation between levels and the
level (stage) of transformer layers over non-overlapping blocks.

`Nested Hierarchical Transformer <https://arxiv.org/abs/2105.12723>`_ (Zhang et al., AAAI 2022).
"""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .export import is_exporting
from .norm import build_norm2d
from .pos_embed import resize_pos_map
from .stage import BackboneStage
from .windows import (
    fitted_window,
    pad_nchw,
    pad_nhwc,
    padding_to_multiple,
    window_key_mask,
    window_partition,
    window_reverse,
)


class NesTPatchEmbed(nn.Module):
    """Non-overlapping ``patch_size`` conv; the image is zero-padded to whole patches first."""

    def __init__(self, in_channels: int, embed_dims: int, patch_size: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, embed_dims, patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad_h, pad_w = padding_to_multiple(x.shape[-2], x.shape[-1], self.patch_size)
        return self.proj(pad_nchw(x, pad_h, pad_w))


class BlockAggregation(nn.Module):
    """conv3x3 -> norm over channels -> max-pool 3x3 stride 2: NCHW (H, W) -> ceil(H/2, W/2).

    ``padding='same'`` reproduces TF "SAME" pooling (for an even side: nothing before, one after),
    which the official weights were trained with; ``'symmetric'`` pads one on each side (timm's
    non-jx models). Both give ceil(n / 2) outputs for any side n, odd or even.
    """

    def __init__(self, in_dims: int, out_dims: int, norm_cfg: dict, padding: str = 'same'):
        super().__init__()
        self.padding = padding
        self.conv = nn.Conv2d(in_dims, out_dims, 3, padding=1)
        self.norm = build_norm2d(norm_cfg, out_dims)

    @staticmethod
    def _same_pad(size: int) -> Tuple[int, int]:
        total = max((math.ceil(size / 2) - 1) * 2 + 3 - size, 0)
        return total // 2, total - total // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.conv(x))
        if self.padding == 'symmetric':
            return F.max_pool2d(x, 3, 2, padding=1)
        if is_exporting():
            # SAME padding is (n % 2 before, 1 after) for every side n: pad one on each side, then
            # drop the first row/col of even sides (sizes are traced values: no branch on them).
            x = F.pad(x, (1, 1, 1, 1), value=torch.finfo(x.dtype).min)
            return F.max_pool2d(x[..., 1 - x.shape[-2] % 2:, 1 - x.shape[-1] % 2:], 3, 2)
        top, bottom = self._same_pad(x.shape[-2])
        left, right = self._same_pad(x.shape[-1])
        x = F.pad(x, (left, right, top, bottom), value=float('-inf'))
        return F.max_pool2d(x, 3, 2)


def blocks_to_map(pos: torch.Tensor, layout: Tuple[int, int, int, int]) -> torch.Tensor:
    """(1, rows * cols, bh * bw, C) blocked embedding -> (1, C, rows * bh, cols * bw) map."""
    rows, cols, bh, bw = layout
    channels = pos.shape[-1]
    pos = pos.reshape(1, rows, cols, bh, bw, channels).permute(0, 5, 1, 3, 2, 4)
    return pos.reshape(1, channels, rows * bh, cols * bw)


def map_to_blocks(pos: torch.Tensor, layout: Tuple[int, int, int, int]) -> torch.Tensor:
    """Inverse of :func:`blocks_to_map`."""
    rows, cols, bh, bw = layout
    channels = pos.shape[1]
    pos = pos.reshape(1, channels, rows, bh, cols, bw).permute(0, 2, 4, 3, 5, 1)
    return pos.reshape(1, rows * cols, bh * bw, channels)


class NesTStage(BackboneStage):
    """One level: (block aggregation), position embedding, transformer layers over blocks.

    Works on the valid (unpadded) NCHW token map. For the layers the map is zero-padded at the
    bottom/right to whole blocks, the blocks become a batch axis (weights shared by all blocks,
    one attention call), and padded tokens are masked out as keys, so valid outputs never depend
    on the padding; the padded rows/cols are dropped again.

    Args:
        blocks (list[TransformerLayer]): The layers.
        block_size (int): Block side in tokens.
        pos_layout (tuple, optional): (rows, cols, bh, bw) of the position embedding at the
            pre-training size; None: no position embedding.
        downsample (nn.Module, optional): Block aggregation from the previous level.
        out_norm (nn.Module, optional): Norm of this stage's output only (the ImageNet model's
            final norm); the next stage takes the map before it, so the backbone applies it.
    """

    def __init__(self, blocks: List[nn.Module], block_size: int,
                 pos_layout: Optional[Tuple[int, int, int, int]],
                 downsample: Optional[nn.Module] = None, out_norm: Optional[nn.Module] = None):
        super().__init__()
        self.block_size = block_size
        self.pos_layout = pos_layout
        self.downsample = downsample
        self.pos_embed = None
        if pos_layout is not None:
            rows, cols, bh, bw = pos_layout
            dims = blocks[0].norm1.normalized_shape[0]
            self.pos_embed = nn.Parameter(torch.zeros(1, rows * cols, bh * bw, dims))
        self.blocks = nn.ModuleList(blocks)
        self.out_norm = out_norm

    def pos_map(self, size: Tuple[int, int]) -> torch.Tensor:
        """The position embedding as one (1, H, W, C) map over the level's real token grid."""
        pos = resize_pos_map(blocks_to_map(self.pos_embed, self.pos_layout), size)
        return pos.permute(0, 2, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """NCHW map -> the map the next stage takes (``out_norm`` is the caller's to apply)."""
        if self.downsample is not None:
            x = self.downsample(x)
        if self.pos_embed is not None or len(self.blocks):
            x = self._attend(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()
        return x

    def _attend(self, x: torch.Tensor) -> torch.Tensor:
        """Position embedding and layers on an NHWC map."""
        height, width = x.shape[1:3]
        if self.pos_embed is not None:
            x = x + self.pos_map((height, width))
        if not len(self.blocks):
            return x
        bh, bw = fitted_window(self.block_size, height, width)
        pad_h, pad_w = padding_to_multiple(height, width, bh, bw)
        key_mask = window_key_mask(height, width, pad_h, pad_w, bh, bw, x.device)
        tokens = window_partition(pad_nhwc(x, pad_h, pad_w), bh, bw)
        for block in self.blocks:
            tokens = self.run_block(block, tokens, key_mask)
        return window_reverse(tokens, bh, bw, height + pad_h, width + pad_w)[:, :height, :width]
