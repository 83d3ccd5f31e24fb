"""Hierarchical multi-head self-attention (H-MHSA) of TransCNN / HAT-Net, on NCHW maps.

Paper: "Transformer in Convolutional Neural Networks", Liu et al., 2021,
https://arxiv.org/abs/2106.03180. Shared by the TransCNN backbone and anything else that
inserts H-MHSA into a CNN.
"""
import functools
from typing import Callable

import torch
import torch.nn as nn

from .attention import multihead_attention
from .export import is_exporting
from .lean import TO_CHANNELS_LAST, lean_layer
from .norm import build_norm2d
from .pooling import pool_cells
from .windows import (
    pad_nhwc,
    padding_to_multiple,
    window_key_mask,
    window_partition,
    window_reverse,
)


def grid_attention(qkv: torch.Tensor, grid_size: int, attention: Callable) -> torch.Tensor:
    """Attention inside non-overlapping ``grid_size`` x ``grid_size`` windows.

    Args:
        qkv (Tensor): (B, H, W, 3C), channels ordered [q | k | v], each head-major.
        grid_size (int): Window side G. H and W need not be multiples of G: the map is padded at
            the bottom/right and the padded tokens are masked out as keys (their own outputs are
            cropped away), so the valid outputs equal attention over the valid tokens only.
        attention (callable): ``attention(q, k, v, key_mask=...)`` on (B', N, C) token groups.

    Returns:
        Tensor: (B, H, W, C).
    """
    _, height, width, _ = qkv.shape
    pad_h, pad_w = padding_to_multiple(height, width, grid_size)
    windows = window_partition(pad_nhwc(qkv, pad_h, pad_w), grid_size, grid_size)
    key_mask = window_key_mask(height, width, pad_h, pad_w, grid_size, grid_size, qkv.device)
    out = attention(*windows.chunk(3, dim=-1), key_mask=key_mask)
    out = window_reverse(out, grid_size, grid_size, height + pad_h, width + pad_w)
    return out[:, :height, :width] if is_exporting() or pad_h or pad_w else out


class HMHSA(nn.Module):
    """Hierarchical multi-head self-attention on an NCHW map.

    ``mode='official'`` (the released code, which has the pretrained weights), for G > 1:
    ``y = grid_norm(x + A_G(qkv(norm(x))))`` with ``A_G`` attention inside G x G windows (no
    projection), then every token of ``y`` queries ``q(y)`` against keys/values
    ``kv(ds_norm(AvgPool_r(y)))``, and the output is ``proj(global + y)``.

    ``mode='iterative'`` (the paper, Sec. 3): ``A_0 = A_G(qkv(X_0)) + X_0`` with ``X_0 = norm(x)``;
    step i merges each G x G grid of ``A_{i-1}`` into one token by ``MaxPool_G + AvgPool_G`` and
    repeats ``A_i = A_G(qkv(X_i)) + X_i`` until one grid covers the whole map; the output is
    ``proj(sum_i Upsample(A_i))``. One ``qkv`` is shared by all steps because their number depends
    on the input size; Upsample repeats each merged token over the pixels it stands for (nearest).

    With G = 1 both modes are plain global MHSA: ``proj(A(qkv(norm(x))))``.

    Args:
        embed_dims (int): Channels.
        num_heads (int): Heads (the official models use embed_dims // 64).
        grid_size (int): Window side G.
        ds_ratio (int): Pooling ratio r of the keys/values of the official global step.
        mode (str): 'official' or 'iterative' (``HMHSA.modes``).
        qkv_bias (bool): Bias of the qkv, q and kv projections.
        drop_rate (float): Channel dropout on the output (``nn.Dropout2d``, as the official code).
        attn_drop_rate (float): Dropout on the attention weights.
        norm_cfg (dict): Norm config.
    """

    modes = ('official', 'iterative')

    def __init__(self, embed_dims: int, num_heads: int, grid_size: int = 1, ds_ratio: int = 1,
                 mode: str = 'official', qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., norm_cfg: dict = dict(type='BN')):
        super().__init__()
        self._check_arguments(embed_dims, num_heads, grid_size, ds_ratio, mode)
        self.num_heads = num_heads
        self.grid_size = grid_size
        self.ds_ratio = ds_ratio
        self.mode = mode
        self.attn_drop_rate = attn_drop_rate
        self.attn_kernel = 'auto'  # see set_attention_kernel
        # 1x1 convolutions in the official code: Linear layers on channels-last tokens here.
        self.norm = build_norm2d(norm_cfg, embed_dims)
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        if grid_size > 1 and mode == 'official':
            self.grid_norm = build_norm2d(norm_cfg, embed_dims)
            self.ds_norm = build_norm2d(norm_cfg, embed_dims)
            self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
            self.kv = nn.Linear(embed_dims, embed_dims * 2, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.drop = nn.Dropout2d(drop_rate)
        self.lean = True  # see mmhvit.models.layers.lean
        self.recompute_long_attention = False  # see multihead_attention

    def _check_arguments(self, embed_dims, num_heads, grid_size, ds_ratio, mode) -> None:
        if mode not in self.modes:
            raise ValueError(f'H-MHSA mode must be one of {self.modes}, got {mode!r}')
        for name, value in (('grid_size', grid_size), ('ds_ratio', ds_ratio)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f'H-MHSA {name} must be an integer >= 1, got {value!r}')
        if num_heads < 1 or embed_dims % num_heads:
            raise ValueError(f'H-MHSA num_heads must be >= 1 and divide embed_dims '
                             f'{embed_dims}, got {num_heads}')

    def _attention(self, q, k, v, key_mask=None, recompute=None):
        return multihead_attention(q, k, v, self.num_heads, key_mask=key_mask,
                                   dropout_p=self.attn_drop_rate if self.training else 0.,
                                   kernel=self.attn_kernel,
                                   recompute=self.lean if recompute is None else recompute,
                                   recompute_long=self.recompute_long_attention)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        if self.grid_size == 1:  # plain global MHSA in both modes
            # qkv(norm(x)), backward keeping x rather than the normed tokens (lean_layer)
            qkv = lean_layer([self.norm, TO_CHANNELS_LAST], self.qkv, x, self.lean)
            out = self._attention(*qkv.flatten(1, 2).chunk(3, dim=-1))
        elif self.mode == 'iterative':  # its steps add the normed tokens
            normed = self.norm(x).permute(0, 2, 3, 1)
            out = self._iterative_steps(normed, self.qkv(normed))
        else:
            out = self._official_steps(x)
        out = self.proj(out).reshape(batch, height, width, channels).permute(0, 3, 1, 2)
        return self.drop(out)

    def _official_steps(self, x: torch.Tensor) -> torch.Tensor:
        """Window attention, then all tokens against pooled keys; returns (B, H * W, C)."""
        if self.lean and not (self.training and self.attn_drop_rate > 0):
            # Backward keeps x only: the norm, the qkv projection and the window attention are
            # recomputed there (the projected qkv alone is three times the size of x).
            local = lean_layer([self.norm, TO_CHANNELS_LAST], self.qkv, x,
                               then=self._recomputed_window_attention)
        else:
            qkv = lean_layer([self.norm, TO_CHANNELS_LAST], self.qkv, x, self.lean)
            local = grid_attention(qkv, self.grid_size, self._attention)
        y = self.grid_norm(x + local.permute(0, 3, 1, 2))
        pooled = self.ds_norm(pool_cells(y, self.ds_ratio, 'avg'))
        k, v = self.kv(pooled.flatten(2).transpose(1, 2)).chunk(2, dim=-1)
        y = y.flatten(2).transpose(1, 2)
        return self._attention(self.q(y), k, v) + y

    def _recomputed_window_attention(self, qkv: torch.Tensor) -> torch.Tensor:
        # (already recomputed as a whole in backward: no recompute of its own)
        return grid_attention(qkv, self.grid_size,
                              functools.partial(self._attention, recompute=False))

    def _iterative_steps(self, tokens: torch.Tensor, qkv: torch.Tensor) -> torch.Tensor:
        """The paper's steps on NHWC maps; returns the sum of the upsampled steps (B, H, W, C)."""
        height, width = tokens.shape[1:3]
        grid, scale, total = self.grid_size, 1, None
        while True:
            step = grid_attention(qkv, grid, self._attention) + tokens
            if scale == 1:
                total = step
            else:
                total = total + step.repeat_interleave(scale, 1).repeat_interleave(
                    scale, 2)[:, :height, :width]
            if step.shape[1] <= grid and step.shape[2] <= grid:
                return total  # this step's single grid covered the whole map
            merged = step.permute(0, 3, 1, 2)
            tokens = (pool_cells(merged, grid, 'max') +
                      pool_cells(merged, grid, 'avg')).permute(0, 2, 3, 1)
            qkv = self.qkv(tokens)
            scale *= grid
