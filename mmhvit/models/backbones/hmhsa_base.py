"""What TransCNN and HAT-Net share: the H-MHSA + inverted-residual block, its stage and the
backbone that stacks them (:class:`HMHSABackbone`); each family adds its downsample, norms and
arches.

Paper: "Transformer in Convolutional Neural Networks", Liu et al., 2021,
https://arxiv.org/abs/2106.03180 (later "Vision Transformers with Hierarchical Attention").
"""
from abc import abstractmethod
from collections import OrderedDict
from typing import List, Optional, Union

import torch
import torch.nn as nn
from mmcv.cnn.bricks import DropPath

from ..converters import describe_hmhsa_checkpoint
from ..layers import (
    HMHSA,
    BackboneStage,
    build_inplace_activation,
    build_norm2d,
    is_exporting,
)
from .base_backbone import HViTBackbone


class InvertedResidual(nn.Module):
    """IRB: 1x1 conv -> depthwise kxk -> 1x1 conv (no biases), activations after the first two.

    ``norm_layout='post'`` (TransCNN): a norm after every conv,
    ``act(norm1(conv1)) -> act(norm2(conv2)) -> norm3(conv3)``. ``norm_layout='pre'`` (HAT-Net): a
    norm on the input and one after the last conv, ``act(conv1(pre_norm)) -> act(conv2) ->
    norm3(conv3)``. Channel dropout follows the depthwise stage and the output in both.
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.norm1(self.conv1(self.pre_norm(x))))
        x = self.drop(self.act(self.norm2(self.conv2(x))))
        return self.drop(self.norm3(self.conv3(x)))


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
        self.attn = HMHSA(embed_dims, num_heads, grid_size, ds_ratio, attn_mode, qkv_bias,
                          drop_rate, attn_drop_rate, norm_cfg)
        self.ffn = InvertedResidual(embed_dims, int(embed_dims * mlp_ratio), kernel_size,
                                    drop_rate, norm_cfg, act_cfg, irb_norm_layout)
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


class HMHSABackbone(HViTBackbone):
    """What TransCNN and HAT-Net share: a stride-4 stem of two 3x3 convs, then four stages of
    H-MHSA + IRB blocks, each stage after the first entered through a stride-2 downsample.

    A subclass sets ``arch_zoo``, ``optional_keys`` (with ``kernel_sizes`` and ``qkv_bias``),
    ``default_norm_cfg``, ``irb_norm_layout`` and implements ``build_downsample`` and
    ``convert_checkpoint``. See :class:`~mmhvit.models.backbones.TransCNN` for the arguments.

    The maps run in channels-last memory: H-MHSA's channels-last tokens are then views of the
    maps, with no permute copies, and oneDNN / cuDNN run the convolutions NHWC natively. The
    outputs are copied to contiguous NCHW (:meth:`HViTBackbone.forward` says why).
    """

    essential_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratio', 'grid_sizes',
                      'ds_ratios')
    default_act_cfg = dict(type='SiLU')
    irb_norm_layout = 'post'
    stem_channels = 16

    def __init__(self, arch: Union[str, dict] = 'small', attn_mode: str = 'official', **kwargs):
        self.attn_mode = attn_mode  # checked by HMHSA
        super().__init__(arch, **kwargs)

    @abstractmethod
    def build_downsample(self, in_dims: int, out_dims: int) -> nn.Module:
        """The stride-2 layer between two stages."""

    def check_arch(self, settings: dict) -> dict:
        settings = super().check_arch(settings)
        name = type(self).__name__
        for key in self.essential_keys + ('kernel_sizes', ):
            values = settings[key]
            if not isinstance(values, (list, tuple)) or len(values) != self.num_stages:
                raise ValueError(f'{name}: arch {key} needs {self.num_stages} values (one per '
                                 f'stage), got {values}')
            if any(v <= 0 for v in values):
                raise ValueError(f'{name}: arch {key} must be positive, got {values}')
            settings[key] = list(values)
        for dims, heads in zip(settings['embed_dims'], settings['num_heads']):
            if dims % heads:
                raise ValueError(f'{name}: embed_dims {settings["embed_dims"]} must be '
                                 f'divisible by num_heads {settings["num_heads"]}')
        return settings

    def _build_layers(self) -> None:
        s = self.arch_settings
        dims = s['embed_dims']
        self.stage_channels = tuple(dims)
        # Stem: two stride-2 3x3 convs to stride 4; the second has no norm and no activation.
        self.patch_embed = nn.Sequential(OrderedDict([
            ('conv1', nn.Conv2d(self.in_channels, self.stem_channels, 3, stride=2, padding=1)),
            ('norm', build_norm2d(self.norm_cfg, self.stem_channels)),
            ('act', build_inplace_activation(self.act_cfg)),
            ('conv2', nn.Conv2d(self.stem_channels, dims[0], 3, stride=2, padding=1)),
        ]))
        rates = self.drop_path_schedule(s['depths'])
        for i in range(self.num_built_stages):
            blocks = [
                TransCNNBlock(dims[i], s['num_heads'][i], s['grid_sizes'][i], s['ds_ratios'][i],
                              s['mlp_ratio'][i], s['kernel_sizes'][i], self.attn_mode,
                              self.qkv_bias, self.drop_rate, self.attn_drop_rate, rate,
                              self.norm_cfg, self.act_cfg, self.irb_norm_layout)
                for rate in rates[i]
            ]
            downsample = self.build_downsample(dims[i - 1], dims[i]) if i > 0 else None
            self.stages.append(TransCNNStage(blocks, downsample))

    def forward_stem(self, x: torch.Tensor) -> torch.Tensor:
        if not is_exporting():  # an exported graph takes the memory layout it is given
            x = x.contiguous(memory_format=torch.channels_last)
        return self.patch_embed(x)

    def describe_checkpoint(self, state_dict: dict) -> str:
        return describe_hmhsa_checkpoint(state_dict, type(self))
