"""Layer-wise learning-rate decay for fine-tuning: deeper layers keep more of the base rate.

MMSeg's ``LayerDecayOptimizerConstructor`` knows only ConvNeXt and BEiT, MMPretrain's only its own
ViT-like models; this one knows the depth order of every mmhvit backbone (stem, then the blocks of
each stage in order) and of the libraries' ResNet, so one recipe serves all of them.
"""
import logging
import re
from collections import Counter
from typing import Dict, Tuple

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapper
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS


def resnet_layer_ids(backbone: nn.Module) -> Tuple[Dict[str, int], int]:
    """Depth order of an mmdet / mmseg / mmpretrain ``ResNet``: the stem is layer 0, then every
    residual block of ``layer1`` .. ``layer4`` in order."""
    depths = [len(getattr(backbone, name)) for name in backbone.res_layers]
    ids = {}
    for name, _ in backbone.named_parameters():
        found = re.match(r'layer(\d+)\.(\d+)\.', name)
        ids[name] = 0 if found is None else \
            1 + sum(depths[:int(found.group(1)) - 1]) + int(found.group(2))
    return ids, sum(depths)


def backbone_layer_ids(backbone: nn.Module) -> Tuple[Dict[str, int], int]:
    """``({parameter name: layer id}, number of block layers)`` of a backbone whose depth order is
    known; raises for any other."""
    from ..models.backbones.base_backbone import HViTBackbone
    if isinstance(backbone, HViTBackbone):
        return backbone.layer_ids()
    if hasattr(backbone, 'res_layers') and all(hasattr(backbone, n) for n in backbone.res_layers):
        return resnet_layer_ids(backbone)
    raise TypeError(f'LayerDecayOptimWrapperConstructor does not know the depth order of '
                    f'{type(backbone).__name__}; it knows the mmhvit backbones and ResNet')


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class LayerDecayOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """``DefaultOptimWrapperConstructor`` with the backbone's learning rates decayed by depth.

    With ``N`` block layers, the stem is layer 0 and the blocks are layers 1..N in forward order;
    a stage's entry pieces (downsample, position embedding) share the layer of its first block and
    its exit pieces (output norms and rescaling) that of its last block. A parameter of layer ``i``
    gets ``lr * layer_decay_rate ** (N + 1 - i)``; everything outside the backbone (neck, heads)
    keeps ``lr``. The other ``paramwise_cfg`` options (``norm_decay_mult``, ``custom_keys``, ...)
    apply as in MMEngine, their ``lr_mult`` multiplying the decayed rate. (BEiT,
    `arXiv 2106.08254 <https://arxiv.org/abs/2106.08254>`_, section 2.5.)

    Example::

        optim_wrapper = dict(
            optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05),
            constructor='LayerDecayOptimWrapperConstructor',
            paramwise_cfg=dict(layer_decay_rate=0.75, norm_decay_mult=0.))

    Args:
        optim_wrapper_cfg (dict): As MMEngine's.
        paramwise_cfg (dict): MMEngine's options plus ``layer_decay_rate`` (in (0, 1]).
    """

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg: dict = None):
        paramwise_cfg = dict(paramwise_cfg or {})
        rate = paramwise_cfg.pop('layer_decay_rate', None)
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate <= 1:
            raise ValueError('LayerDecayOptimWrapperConstructor needs paramwise_cfg.'
                             f'layer_decay_rate, a number in (0, 1]; got {rate!r}')
        super().__init__(optim_wrapper_cfg, paramwise_cfg)
        self.layer_decay_rate = float(rate)
        # Every parameter gets its own group, also when no other option is set.
        self.paramwise_cfg.setdefault('norm_decay_mult', None)

    def __call__(self, model: nn.Module) -> OptimWrapper:
        net = model.module if hasattr(model, 'module') else model
        if not isinstance(getattr(net, 'backbone', None), nn.Module):
            raise TypeError(f'LayerDecayOptimWrapperConstructor needs a model with a backbone; '
                            f'{type(net).__name__} has none')
        ids, num_layers = backbone_layer_ids(net.backbone)
        self._scales = {id(param): self.layer_decay_rate**(num_layers + 1 - ids[name])
                        for name, param in net.backbone.named_parameters()}
        self._log_scales(ids, num_layers)
        return super().__call__(model)

    def add_params(self, params, module, prefix='', is_dcn_module=None) -> None:
        start = len(params)
        super().add_params(params, module, prefix, is_dcn_module)
        if prefix:  # the recursion's inner calls: the outermost call scales every group once
            return
        for group in params[start:]:
            scale = self._scales.get(id(group['params'][0]), 1.)
            group['lr'] = group.get('lr', self.base_lr) * scale
            group['lr_scale'] = scale

    def _log_scales(self, ids: Dict[str, int], num_layers: int) -> None:
        counts = Counter(ids.values())
        lines = [f'layer {i}: lr x {self.layer_decay_rate**(num_layers + 1 - i):.4g} '
                 f'({counts[i]} tensors)' for i in sorted(counts)]
        print_log(f'layer-wise lr decay {self.layer_decay_rate}, {num_layers} block layers: ' +
                  '; '.join(lines), logger='current', level=logging.INFO)
