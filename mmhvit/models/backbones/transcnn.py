"""TransCNN: hierarchical multi-head self-attention (H-MHSA) inside a CNN.

Paper: "Transformer in Convolutional Neural Networks", Liu et al., 2021,
https://arxiv.org/abs/2106.03180 (later "Vision Transformers with Hierarchical Attention").
The layers follow the released ``TransCNN.py`` (yun-liu/HAT-Net, commit 0bd7463), so that its
ImageNet weights load through
:func:`~mmhvit.models.converters.convert_transcnn_checkpoint`; on top of it this version takes
any input size and offers the paper's iterative H-MHSA as ``attn_mode='iterative'``.
"""
import torch.nn as nn

from ...registry import register_backbone
from ..converters import convert_transcnn_checkpoint
from ..layers import TwoBranchDownsample
from .hmhsa_base import HMHSABackbone


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
        return TwoBranchDownsample(in_dims, out_dims, norm_cfg=self.norm_cfg, act_cfg=self.act_cfg)

    def convert_checkpoint(self, state_dict: dict) -> dict:
        return convert_transcnn_checkpoint(state_dict)

