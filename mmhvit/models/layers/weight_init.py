"""The initialisation every family's official code uses (and the H-MHSA plugin)."""
from typing import Tuple, Type

import torch.nn as nn
from mmengine.model.weight_init import trunc_normal_

from .norm import is_batch_norm


def _is_norm(module: nn.Module) -> bool:
    return is_batch_norm(module) or isinstance(module, (nn.GroupNorm, nn.LayerNorm))


def trunc_normal_init(model: nn.Module,
                      layer_types: Tuple[Type[nn.Module], ...] = (nn.Linear, nn.Conv2d),
                      std: float = .02) -> None:
    """Truncated normal (``std``) weights and zero biases for every ``layer_types`` module of
    ``model``; weight 1 and bias 0 for its affine norms. Other modules keep their own init (TNT's
    official code, for one, leaves its convs at PyTorch's default: ``layer_types=(nn.Linear, )``).
    """
    for module in model.modules():
        if isinstance(module, layer_types):
            trunc_normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif _is_norm(module) and module.weight is not None:
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
