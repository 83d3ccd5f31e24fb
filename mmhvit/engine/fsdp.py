"""Sharded training (MMEngine's ``FlexibleRunner`` + ``FSDPStrategy``): one FSDP unit per block.

``configs/_fsdp.py`` names :func:`hvit_block_wrap_policy` as the strategy's ``auto_wrap_policy``;
a ``configs/*_fsdp_in1k.py`` config sets its family. Every block of the backbone becomes its own
FSDP unit (its parameters are gathered only while it runs); the stem, the downsampling layers, the
neck and the head stay in the root unit.
"""
from typing import Dict, Type

import torch.nn as nn
from mmengine.registry import FUNCTIONS
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy


def family_blocks() -> Dict[str, Type[nn.Module]]:
    """``{backbone family: the class of its blocks}`` (what the stages' ``blocks`` hold)."""
    from mmhvit.models.layers import PyramidTNTBlock, TNTBlock, TransCNNBlock, TransformerLayer
    # HAT-Net's stages are TransCNN's (H-MHSA + inverted residual blocks).
    return dict(TransCNN=TransCNNBlock, HATNet=TransCNNBlock, NesT=TransformerLayer,
                TNT=TNTBlock, PyramidTNT=PyramidTNTBlock)


@FUNCTIONS.register_module()
def hvit_block_wrap_policy(module: nn.Module, recurse: bool, nonwrapped_numel: int,
                           family: str) -> bool:
    """FSDP ``auto_wrap_policy``: wrap every block of a ``family`` backbone in its own unit.

    Per family rather than for all block classes at once: TNT's and PyramidTNT's blocks hold
    NesT's ``TransformerLayer``, which would otherwise become nested units.

    Args:
        module (nn.Module): The module FSDP asks about.
        recurse (bool): Whether FSDP asks if it should descend into ``module``.
        nonwrapped_numel (int): Parameters not yet wrapped (unused: wrapping is by class).
        family (str): ``'TransCNN'``, ``'HATNet'``, ``'NesT'``, ``'TNT'`` or ``'PyramidTNT'``.

    Returns:
        bool: Whether to descend into / wrap ``module``.
    """
    blocks = family_blocks()
    if family not in blocks:
        raise ValueError(f'hvit_block_wrap_policy: unknown family {family!r}; one of '
                         f'{sorted(blocks)}')
    return transformer_auto_wrap_policy(module, recurse, nonwrapped_numel,
                                        transformer_layer_cls={blocks[family]})
