"""What TransCNN and HAT-Net share: the backbone that stacks H-MHSA + inverted-residual blocks
(:class:`HMHSABackbone`, its forward included); each family adds its downsample, norms and arches.
The blocks live in :mod:`mmhvit.models.layers.hmhsa_blocks`.

Paper: "Transformer in Convolutional Neural Networks", Liu et al., 2021,
https://arxiv.org/abs/2106.03180 (later "Vision Transformers with Hierarchical Attention").
"""
from abc import abstractmethod
from collections import OrderedDict
from typing import Tuple, Union

import torch
import torch.nn as nn

from ..converters import describe_hmhsa_checkpoint
from ..layers import (
    TransCNNBlock,
    TransCNNStage,
    build_inplace_activation,
    build_norm2d,
    is_exporting,
)
from .base_backbone import HViTBackbone


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
                TransCNNBlock(dims[i], s['num_heads'][i], grid_size=s['grid_sizes'][i],
                              ds_ratio=s['ds_ratios'][i], mlp_ratio=s['mlp_ratio'][i],
                              kernel_size=s['kernel_sizes'][i], attn_mode=self.attn_mode,
                              qkv_bias=self.qkv_bias, drop_rate=self.drop_rate,
                              attn_drop_rate=self.attn_drop_rate, drop_path_rate=rate,
                              norm_cfg=self.norm_cfg, act_cfg=self.act_cfg,
                              irb_norm_layout=self.irb_norm_layout)
                for rate in rates[i]
            ]
            downsample = self.build_downsample(dims[i - 1], dims[i]) if i > 0 else None
            self.stages.append(TransCNNStage(blocks, downsample))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input(x)
        if not is_exporting():  # an exported graph takes the memory layout it is given
            x = x.contiguous(memory_format=torch.channels_last)
        x = self.patch_embed(x)
        outs = []
        for index, stage in enumerate(self.stages):
            x = stage(x)
            if index in self.out_indices:
                outs.append(x)
        return self.nchw_outputs(outs)

    def describe_checkpoint(self, state_dict: dict) -> str:
        return describe_hmhsa_checkpoint(state_dict, type(self))
