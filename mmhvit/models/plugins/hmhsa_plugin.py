"""H-MHSA as a plugin for any CNN: the ``plugins`` slot of MMDet's (and MMSeg's) ResNet.

Paper: "Transformer in Convolutional Neural Networks", Liu et al., 2021,
https://arxiv.org/abs/2106.03180 (H-MHSA "can be easily inserted into any CNN").
"""
from typing import Optional

import torch
import torch.nn as nn
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule

from ...registry import register_backbone
from ..layers import HMHSA, trunc_normal_init


# register_backbone registers any model class: 'mmhvit.HMHSAPlugin' and, since no OpenMMLab library
# owns the name, the plain 'HMHSAPlugin' from the mmdet, mmseg and mmpretrain scopes.
@register_backbone(plain_name=True)
class HMHSAPlugin(BaseModule):
    """A residual H-MHSA block for the ``plugins`` of a CNN (MMCV's ``build_plugin_layer``).

    ``out = x + drop_path(expand(HMHSA(reduce(x))))``: a 1x1 conv reduces the channels to
    ``in_channels * ratio``, :class:`~mmhvit.models.layers.HMHSA` (the TransCNN backbone's layer:
    norm, H-MHSA in the chosen mode, projection) attends, and a 1x1 conv restores the channels. With
    ``ratio=1`` there is no reduce / expand conv. The last linear map of the branch (``expand``, or
    H-MHSA's ``proj`` when ``ratio=1``) starts at zero, weight and bias, so the block starts as the
    identity: a pretrained CNN with the plugin gives exactly its old outputs at step 0, and the
    first gradient step reaches that map (as ``NonLocal2d``'s ``zero_init``).

    Any input size works: H-MHSA pads a map to whole windows and masks the padded keys out, and
    pools partial border cells over their valid pixels only.

    Example (MMDet ResNet-50, stages 2-4)::

        plugins=[dict(cfg=dict(type='mmhvit.HMHSAPlugin', grid_size=8, ds_ratio=4),
                      stages=(False, True, True, True), position='after_conv3')]

    Args:
        in_channels (int): Channels of the map (``build_plugin_layer`` passes it).
        ratio (float): Attention channels / ``in_channels``. Default: 1/4 (as ``ContextBlock``'s
            configs): at ``after_conv3`` of ResNet-50 full width would cost 7 C^2 params per block.
        grid_size (int): H-MHSA window side G (1: plain global attention). Default: 8.
        ds_ratio (int): Pooling ratio of the keys / values of the official global step. Default: 4.
        num_heads (int, optional): Attention heads; None: attention channels // ``head_dims``
            (at least 1).
        head_dims (int): Channels per head when ``num_heads`` is None. Default: 64 (as TransCNN).
        mode (str): 'official' (the released H-MHSA) or 'iterative' (the paper's). Default:
            'official'. H-MHSA checks ``mode``, ``grid_size`` and ``ds_ratio``.
        qkv_bias (bool): Bias of the attention projections. Default: True.
        drop_rate (float): Channel dropout on the H-MHSA output. Default: 0.
        attn_drop_rate (float): Dropout on the attention weights. Default: 0.
        drop_path_rate (float): Stochastic depth of the residual branch. Default: 0.
        norm_cfg (dict): H-MHSA's norms. Default: LN (per-pixel LayerNorm over channels): a
            detector's ResNet keeps its BatchNorms in eval mode (``norm_eval``), where a new BN
            would keep its initial statistics for ever.
        init_cfg (dict, optional): MMEngine init config; None: truncated normal (std .02) for the
            convs and linears, then the zero start above.
    """
    _abbr_ = 'hmhsa_block'  # module name in the ResNet block: hmhsa_block<postfix>

    def __init__(self, in_channels: int, ratio: float = 1 / 4, grid_size: int = 8,
                 ds_ratio: int = 4, num_heads: Optional[int] = None, head_dims: int = 64,
                 mode: str = 'official', qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: float = 0.,
                 norm_cfg: dict = dict(type='LN'), init_cfg: Optional[dict] = None):
        super().__init__(init_cfg)
        if not 0 < ratio <= 1:
            raise ValueError(f'ratio must be in (0, 1], got {ratio!r}')
        embed_dims = int(round(in_channels * ratio))
        if num_heads is None:
            num_heads = max(embed_dims // head_dims, 1)
        if num_heads < 1 or embed_dims % num_heads:
            raise ValueError(f'num_heads must be >= 1 and divide the attention channels '
                             f'in_channels * ratio = {embed_dims}, got {num_heads} (set num_heads '
                             f'or a head_dims that divides them)')
        self.in_channels = in_channels
        self.embed_dims = embed_dims
        if embed_dims == in_channels:
            self.reduce = self.expand = None
        else:
            self.reduce = nn.Conv2d(in_channels, embed_dims, 1)
            self.expand = nn.Conv2d(embed_dims, in_channels, 1)
        self.attn = HMHSA(embed_dims, num_heads, grid_size=grid_size, ds_ratio=ds_ratio,
                          mode=mode, qkv_bias=qkv_bias, drop_rate=drop_rate,
                          attn_drop_rate=attn_drop_rate, norm_cfg=norm_cfg)
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0. else nn.Identity()
        self._zero_last()  # the identity start holds even if init_weights is never called

    @property
    def last_layer(self) -> nn.Module:
        """The map that starts at zero: the branch's output layer."""
        return self.attn.proj if self.expand is None else self.expand

    def _zero_last(self) -> None:
        nn.init.zeros_(self.last_layer.weight)
        nn.init.zeros_(self.last_layer.bias)

    def init_weights(self) -> None:
        if self.init_cfg is not None:
            super().init_weights()
            return
        trunc_normal_init(self)
        self._zero_last()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x if self.reduce is None else self.reduce(x)
        y = self.attn(y)
        y = y if self.expand is None else self.expand(y)
        return x + self.drop_path(y)
