"""TransCNN: hierarchical multi-head self-attention (H-MHSA) inside a CNN.

Paper: "Transformer in Convolutional Neural Networks", Liu et al., 2021,
https://arxiv.org/abs/2106.03180 (later "Vision Transformers with Hierarchical Attention").
The layers follow the released ``TransCNN.py`` (yun-liu/HAT-Net, commit 0bd7463), so that its
ImageNet weights load through
:func:`~mmhvit.models.converters.convert_transcnn_checkpoint`; on top of it this version takes
any input size and offers the paper's iterative H-MHSA as ``attn_mode='iterative'``.
"""
from abc import abstractmethod
from collections import OrderedDict
from typing import List, Optional, Union

import torch
import torch.nn as nn
from mmcv.cnn.bricks import DropPath
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_backbone
from ..converters import convert_transcnn_checkpoint, describe_hmhsa_checkpoint
from ..layers import (  # noqa: F401
    HMHSA,
    BackboneStage,
    build_inplace_activation,
    build_norm2d,
    grid_attention,
    is_exporting,
    pool_cells,
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


class TwoBranchDownsample(nn.Module):
    """TDB: ``act(norm1(conv3x3 s2(x)) + norm2(conv1x1(maxpool2x2(x))))``.

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


class TransCNNStage(BackboneStage):
    """One stage: the TDB from the previous stage (stages 2-4), then the blocks."""

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
    ``default_norm_cfg``, ``irb_norm_layout`` and implements ``build_downsample`` and the
    checkpoint methods. See :class:`TransCNN` for the arguments.

    The maps run in channels-last memory (``channels_last``, an attribute so that a benchmark can
    time the NCHW layout too): H-MHSA's channels-last tokens are then views of the maps, with no
    permute copies, and oneDNN / cuDNN run the convolutions NHWC natively. The outputs are NCHW
    tensors with channels-last strides.
    """

    essential_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratio', 'grid_sizes',
                      'ds_ratios')
    renamed_arch_keys = {'expansions': 'mlp_ratio'}
    default_act_cfg = dict(type='SiLU')
    attn_modes = ('official', 'iterative')
    irb_norm_layout = 'post'
    stem_channels = 16
    channels_last = True

    def __init__(self, arch: Union[str, dict] = 'small', attn_mode: str = 'official', **kwargs):
        if attn_mode not in self.attn_modes:
            raise ValueError(f'{type(self).__name__}: attn_mode must be one of {self.attn_modes}, '
                             f'got {attn_mode!r}')
        self.attn_mode = attn_mode
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

    def init_default_weights(self) -> None:
        """The official initialisation: truncated normal (std .02) for convs and linears."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)):
                if m.weight is not None:
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

    def _forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        if self.channels_last and not is_exporting():
            x = x.contiguous(memory_format=torch.channels_last)
        x = self.patch_embed(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.out_indices:
                outs.append(x)
        return outs

    def describe_checkpoint(self, state_dict: dict) -> str:
        return describe_hmhsa_checkpoint(state_dict, type(self))


@register_backbone(plain_name=True)
class TransCNN(HMHSABackbone):
    """TransCNN backbone: H-MHSA + inverted residual blocks in a 4-stage CNN (strides 4-32).

    Paper: `Transformer in Convolutional Neural Networks <https://arxiv.org/abs/2106.03180>`_.
    The layers are those of the official ``TransCNN.py`` (its checkpoints load through
    ``init_cfg``). Unlike it, any input of at least 1 x 1 works: stage maps are
    ceil(H/s) x ceil(W/s); windows are padded internally with the padded tokens masked out of
    attention, pooled keys average valid pixels only, and the downsample pools in ceil mode, so
    padding never changes valid outputs, and inputs the official code accepts (multiples of 128)
    give exactly its results.

    Args:
        arch (str | dict): 'tiny', 'small' (alias 'base', the paper's ResNet-50-sized
            TransCNN-Base), 'medium', 'large', or a dict with the keys ``embed_dims``, ``depths``,
            ``num_heads``, ``mlp_ratio`` (IRB expansion), ``grid_sizes``, ``ds_ratios`` (4 values
            each) and optionally ``kernel_sizes`` (depthwise kernels, default [5, 3, 5, 3]) and
            ``qkv_bias`` (default True). Default: 'small'.
        attn_mode (str): 'official' (default; the released two-step H-MHSA, the one with
            pretrained weights) or 'iterative' (the paper's multi-step H-MHSA, see :class:`HMHSA`).
        **kwargs: The arguments every backbone takes (:class:`HViTBackbone`): ``in_channels``,
            ``out_indices``, ``drop_rate`` (channel dropout of the attention and IRB outputs),
            ``attn_drop_rate``, ``drop_path_rate``, ``qkv_bias``, ``norm_cfg`` (default BN),
            ``act_cfg`` (default SiLU), ``frozen_stages``, ``norm_eval``, ``with_cp``,
            ``pretrained``, ``init_cfg``.
    """

    arch_zoo = {
        'tiny': dict(embed_dims=[64, 128, 256, 512], depths=[2, 2, 4, 2], num_heads=[1, 2, 4, 8],
                     mlp_ratio=[4, 4, 4, 4], grid_sizes=[8, 8, 8, 1], ds_ratios=[8, 4, 2, 1]),
        **dict.fromkeys(['small', 'base'],
                        dict(embed_dims=[64, 128, 256, 512], depths=[3, 4, 8, 3],
                             num_heads=[1, 2, 4, 8], mlp_ratio=[4, 4, 6, 6],
                             grid_sizes=[8, 8, 8, 1], ds_ratios=[8, 4, 2, 1])),
        'medium': dict(embed_dims=[64, 128, 320, 640], depths=[3, 4, 12, 3],
                       num_heads=[1, 2, 5, 10], mlp_ratio=[4, 4, 6, 6], grid_sizes=[8, 8, 8, 1],
                       ds_ratios=[8, 4, 2, 1]),
        'large': dict(embed_dims=[64, 128, 384, 768], depths=[3, 4, 16, 3],
                      num_heads=[1, 2, 6, 12], mlp_ratio=[4, 4, 6, 6], grid_sizes=[8, 8, 8, 1],
                      ds_ratios=[8, 4, 2, 1]),
    }
    optional_keys = {'kernel_sizes': [5, 3, 5, 3], 'qkv_bias': True}
    default_norm_cfg = dict(type='BN', requires_grad=True)

    def build_downsample(self, in_dims: int, out_dims: int) -> nn.Module:
        return TwoBranchDownsample(in_dims, out_dims, self.norm_cfg, self.act_cfg)

    def convert_checkpoint(self, state_dict: dict) -> dict:
        return convert_transcnn_checkpoint(state_dict)

