"""HAT-Net: the published successor of TransCNN (H-MHSA inside a CNN, GroupNorm throughout).

Paper: "Vision Transformers with Hierarchical Attention", Liu et al., Machine Intelligence Research
2024, https://arxiv.org/abs/2106.03180 (v3 onwards; v1 was "Transformer in Convolutional Neural
Networks"). The layers follow the released ``HAT_Net.py`` (yun-liu/HAT-Net), so that its ImageNet
weights load through :func:`~mmhvit.models.converters.convert_hatnet_checkpoint`. The stem,
blocks and H-MHSA are TransCNN's (:class:`~mmhvit.models.backbones.hmhsa_base.HMHSABackbone`);
HAT-Net differs in its norms (GroupNorm(1, C, eps=1e-6)), its IRB norm placement, its
single-branch downsample and its arches.
"""
import torch.nn as nn

from ...registry import register_backbone
from ..converters import convert_hatnet_checkpoint
from ..layers import ConvDownsample
from .hmhsa_base import HMHSABackbone


@register_backbone(plain_name=True)
class HATNet(HMHSABackbone):
    """HAT-Net backbone: H-MHSA + inverted residual blocks in a 4-stage CNN (strides 4-32).

    Paper: `Vision Transformers with Hierarchical Attention
    <https://arxiv.org/abs/2106.03180>`_. The layers are those of the official ``HAT_Net.py`` (its
    ImageNet checkpoints, trained at 224 x 224, load through ``init_cfg``): a stem conv3x3 s2 (16
    channels) - GN - SiLU - conv3x3 s2; blocks ``x + H-MHSA(x)``, ``x + IRB(x)`` with the IRB
    ``GN - 1x1 - SiLU - dw kxk - SiLU - 1x1 - GN``; ``GN(conv3x3 s2)`` between stages. Its unused
    ``attn.proj_norm`` is not built.

    Any input of at least 1 x 1 works, with ceil(H/s) x ceil(W/s) maps. The feature maps are never
    padded: windows pad only the tokens inside attention (masked out as keys, their outputs
    cropped), pooled keys average the pixels that exist and convs zero-pad as in the official
    code. So every GroupNorm takes its statistics over exactly the real map, padding never changes
    a valid output, and 224 x 224 (the official size, where no window is partial) gives exactly the
    official numbers.

    Args:
        arch (str | dict): 'tiny', 'small', 'medium', 'large', or a dict with the keys
            ``embed_dims``, ``depths``, ``num_heads`` (the official ``dim // head_dim``),
            ``mlp_ratio`` (IRB expansion), ``grid_sizes``, ``ds_ratios`` (4 values each) and
            optionally ``kernel_sizes`` (depthwise kernels, default [3, 3, 3, 3]) and ``qkv_bias``
            (default True). Default: 'small'.
        attn_mode (str): 'official' (default; the released two-step H-MHSA) or 'iterative' (the
            paper's multi-step H-MHSA, see :class:`~mmhvit.models.layers.HMHSA`; no weights).
        **kwargs: The arguments every backbone takes (:class:`HViTBackbone`): ``in_channels``,
            ``out_indices``, ``drop_rate`` (channel dropout of the attention and IRB outputs),
            ``attn_drop_rate``, ``drop_path_rate``, ``qkv_bias``, ``norm_cfg`` (default
            GroupNorm(1, C, eps=1e-6)), ``act_cfg`` (default SiLU), ``frozen_stages``,
            ``norm_eval`` (acts on BatchNorm only: none by default), ``with_cp``, ``pretrained``,
            ``init_cfg``.
    """

    _common = dict(mlp_ratio=[8, 8, 4, 4], grid_sizes=[8, 7, 7, 1], ds_ratios=[8, 4, 2, 1])
    arch_zoo = {
        'tiny': dict(embed_dims=[48, 96, 240, 384], depths=[2, 2, 6, 3], num_heads=[1, 2, 5, 8],
                     **_common),
        'small': dict(embed_dims=[64, 128, 320, 512], depths=[2, 3, 8, 3],
                      num_heads=[1, 2, 5, 8], **_common),
        'medium': dict(embed_dims=[64, 128, 320, 512], depths=[3, 6, 18, 3],
                       num_heads=[1, 2, 5, 8], kernel_sizes=[5, 3, 5, 3], **_common),
        'large': dict(embed_dims=[64, 128, 320, 640], depths=[3, 8, 27, 3],
                      num_heads=[1, 2, 5, 10], **_common),
    }
    del _common
    optional_keys = {'kernel_sizes': [3, 3, 3, 3], 'qkv_bias': True}
    default_norm_cfg = dict(type='GN', num_groups=1, eps=1e-6, requires_grad=True)
    irb_norm_layout = 'pre'

    def build_downsample(self, in_dims: int, out_dims: int) -> nn.Module:
        return ConvDownsample(in_dims, out_dims, self.norm_cfg)

    def convert_checkpoint(self, state_dict: dict) -> dict:
        return convert_hatnet_checkpoint(state_dict)

