"""timm's NesT and TNT (the references of those families) built for one of our arch dicts, with
random weights that leave no tensor at its init value (a swapped or misnamed tensor shows).

timm is a test requirement (``requirements/tests.txt``), imported when these are called.
"""
import torch
import torch.nn as nn


def randomized(model: nn.Module, scale: float = 0.1) -> nn.Module:
    """``model`` with every parameter moved by Gaussian noise (timm zero-initialises biases and
    sets LayerNorms to 1 / 0); in eval mode."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * scale)
    return model.eval()


def timm_tnt(arch: dict, img_size: int = 64, legacy: bool = False, num_classes: int = 10,
             seed: int = 0) -> nn.Module:
    """timm's ``TNT`` with the sizes of our TNT ``arch`` (16-pixel sentences of 4 x 4 words)."""
    from timm.models.tnt import TNT
    torch.manual_seed(seed)
    model = TNT(img_size=img_size, num_classes=num_classes, legacy=legacy, patch_size=16,
                embed_dim=arch['embed_dims'], inner_dim=arch['inner_dims'],
                depth=sum(arch['depths']), num_heads_inner=arch['inner_num_heads'],
                num_heads_outer=arch['num_heads'])
    return randomized(model)


def timm_nest(arch: dict, img_size: int = 64, num_classes: int = 10, seed: int = 0,
              **kwargs) -> nn.Module:
    """timm's ``Nest`` with the first three levels of our NesT ``arch`` (timm's levels; its
    default initialisation). ``kwargs``: e.g. ``pad_type='same'``."""
    from timm.models.nest import Nest
    torch.manual_seed(seed)
    return Nest(img_size=img_size, embed_dims=tuple(arch['embed_dims'][:3]),
                num_heads=tuple(arch['num_heads'][:3]), depths=tuple(arch['depths'][:3]),
                num_classes=num_classes, **kwargs).eval()
