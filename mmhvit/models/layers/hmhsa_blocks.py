"""The modules TransCNN and HAT-Net stack: the H-MHSA + inverted-residual block, its stage and
the two families' stride-2 downsamples.

Paper: "Transformer in Convolutional Neural Networks", Liu et al., 2021,
https://arxiv.org/abs/2106.03180 (later "Vision Transformers with Hierarchical Attention").
"""
from typing import List, Optional

import torch
import torch.nn as nn
from mmcv.cnn.bricks import DropPath

from .activation import build_inplace_activation
from .banded import banded_applies, banded_inverted_residual
from .hmhsa import HMHSA
from .lean import lean_layer
from .norm import build_norm2d
from .pooling import pool_cells
from .stage import BackboneStage


class InvertedResidual(nn.Module):
    """IRB: 1x1 conv -> depthwise kxk -> 1x1 conv (no biases), activations after the first two.

    ``norm_layout='post'`` (TransCNN): a norm after every conv,
    ``act(norm1(conv1)) -> act(norm2(conv2)) -> norm3(conv3)``. ``norm_layout='pre'`` (HAT-Net): a
    norm on the input and one after the last conv, ``act(conv1(pre_norm)) -> act(conv2) ->
    norm3(conv3)``. Channel dropout follows the depthwise stage and the output in both. With
    ``lean`` (default), conv3's input is recomputed in backward from the block's input
    (:func:`~mmhvit.models.layers.lean.lean_layer`): the same numbers, less memory kept for
    backward.
    """
    norm_layouts = ('post', 'pre')

    def __init__(self, embed_dims: int, hidden_dims: int, kernel_size: int = 3,
                 drop_rate: float = 0., norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='SiLU'), norm_layout: str = 'post'):
        super().__init__()
        if norm_layout not in self.norm_layouts:
            raise ValueError(f'InvertedResidual: norm_layout must be one of {self.norm_layouts}, '
                             f'got {norm_layout!r}')
        post = norm_layout == 'post'
        self.pre_norm = nn.Identity() if post else build_norm2d(norm_cfg, embed_dims)
        self.conv1 = nn.Conv2d(embed_dims, hidden_dims, 1, bias=False)
        self.norm1 = build_norm2d(norm_cfg, hidden_dims) if post else nn.Identity()
        self.conv2 = nn.Conv2d(hidden_dims, hidden_dims, kernel_size, padding=kernel_size // 2,
                               groups=hidden_dims, bias=False)
        self.norm2 = build_norm2d(norm_cfg, hidden_dims) if post else nn.Identity()
        self.conv3 = nn.Conv2d(hidden_dims, embed_dims, 1, bias=False)
        self.norm3 = build_norm2d(norm_cfg, embed_dims)
        self.act = build_inplace_activation(act_cfg)
        self.drop = nn.Dropout2d(drop_rate)
        self.lean = True  # see mmhvit.models.layers.lean
        self.banded_backward = False  # see mmhvit.models.layers.banded; on with with_cp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # conv3(drop(act(norm2(conv2(act(norm1(conv1(pre_norm(x)))))))): where lean_layer can,
        # backward keeps only x and recomputes everything that feeds conv3, conv1 included: its
        # expanded output is the largest map of the block.
        head, tail = [self.pre_norm, self.conv1, self.norm1, self.act], [self.norm2, self.act,
                                                                       self.drop]
        if self.lean and self.banded_backward and banded_applies(head, self.conv2, tail,
                                                                 self.conv3, x):
            # (with_cp) the same, its backward a band of rows at a time: see layers.banded
            x = banded_inverted_residual(head, self.conv2, tail, self.conv3, x)
        else:
            x = lean_layer([*head, self.conv2, *tail], self.conv3, x, self.lean)
        return self.drop(self.norm3(x))


class TransCNNBlock(nn.Module):
    """``x + drop_path(H-MHSA(x))``, then ``x + drop_path(IRB(x))``.

    Args:
        embed_dims (int): Channels.
        num_heads (int): Attention heads.
        grid_size (int): H-MHSA window side.
        ds_ratio (int): H-MHSA key/value pooling ratio.
        mlp_ratio (float): IRB hidden / input channels.
        kernel_size (int): IRB depthwise kernel.
        attn_mode (str): H-MHSA mode, 'official' or 'iterative'.
        qkv_bias (bool): Bias of the attention projections.
        drop_rate (float): Channel dropout of the attention and IRB outputs.
        attn_drop_rate (float): Dropout on the attention weights.
        drop_path_rate (float): Stochastic depth of this block.
        norm_cfg (dict): Norm layers.
        act_cfg (dict): IRB activation.
        irb_norm_layout (str): IRB norm placement, 'post' (TransCNN) or 'pre' (HAT-Net).
    """

    def __init__(self, embed_dims: int, num_heads: int, grid_size: int, ds_ratio: int,
                 mlp_ratio: float, kernel_size: int, attn_mode: str = 'official',
                 qkv_bias: bool = True, drop_rate: float = 0., attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0., norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='SiLU'), irb_norm_layout: str = 'post'):
        super().__init__()
        self.attn = HMHSA(embed_dims, num_heads, grid_size=grid_size, ds_ratio=ds_ratio,
                          mode=attn_mode, qkv_bias=qkv_bias, drop_rate=drop_rate,
                          attn_drop_rate=attn_drop_rate, norm_cfg=norm_cfg)
        self.ffn = InvertedResidual(embed_dims, int(embed_dims * mlp_ratio),
                                    kernel_size=kernel_size, drop_rate=drop_rate,
                                    norm_cfg=norm_cfg, act_cfg=act_cfg,
                                    norm_layout=irb_norm_layout)
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0. else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.attn(x))
        return x + self.drop_path(self.ffn(x))


class TransCNNStage(BackboneStage):
    """One stage: the downsample from the previous stage (stages 2-4; TransCNN's two-branch
    TDB, HAT-Net's conv), then the blocks."""

    def __init__(self, blocks: List[nn.Module], downsample: Optional[nn.Module] = None):
        super().__init__()
        self.downsample = downsample
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.downsample is not None:
            x = self.downsample(x)
        for block in self.blocks:
            x = self.run_block(block, x)
        return x


class TwoBranchDownsample(nn.Module):
    """TransCNN's TDB: ``act(norm1(conv3x3 s2(x)) + norm2(conv1x1(maxpool2x2(x))))``.

    The max pool runs in ceil mode, so an odd side gives ceil(H/2) like the strided conv (the
    official floor-mode pool crashes there); its last cell takes the max of the pixels that exist,
    as if the map were padded to even with -inf. Even sides are exactly the official layer.
    """

    def __init__(self, in_dims: int, out_dims: int, norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='SiLU')):
        super().__init__()
        self.conv = nn.Conv2d(in_dims, out_dims, 3, stride=2, padding=1)
        self.residual = nn.Conv2d(in_dims, out_dims, 1)
        self.norm1 = build_norm2d(norm_cfg, out_dims)
        self.norm2 = build_norm2d(norm_cfg, out_dims)
        self.act = build_inplace_activation(act_cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = pool_cells(x, 2, 'max')  # ceil-mode 2x2 max pool, export-safe when traced
        return self.act(self.norm1(self.conv(x)) + self.norm2(self.residual(pooled)))


class ConvDownsample(nn.Module):
    """HAT-Net's stage transition: ``norm(conv3x3 s2 p1(x))``, no activation."""

    def __init__(self, in_dims: int, out_dims: int, norm_cfg: dict):
        super().__init__()
        self.conv = nn.Conv2d(in_dims, out_dims, 3, stride=2, padding=1)
        self.norm = build_norm2d(norm_cfg, out_dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))
