"""Activations of convolutional blocks."""
import torch.nn as nn
from mmcv.cnn import build_activation_layer


def build_inplace_activation(act_cfg: dict) -> nn.Module:
    """``build_activation_layer`` that works in place where the layer can (SiLU, ReLU...).

    For activations that follow a conv or a norm: neither needs its output for backward, so
    overwriting it is safe, and on the CPU it saves a fresh allocation (and its page faults) per
    call, which dominates an activation's time on large maps.
    """
    act = build_activation_layer(act_cfg)
    if hasattr(act, 'inplace'):
        act.inplace = True
    return act
