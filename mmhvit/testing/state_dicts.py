"""Official-layout state dicts for the tests: key -> shape tables, their key lists, random weights
and the checkpoint files the official training scripts write."""
import argparse
import math
import os
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn

Shapes = Dict[str, Tuple[int, ...]]


def add_conv_shapes(shapes: Shapes, name: str, out_ch: int, in_ch: int, k: int,
                    bias: bool = True) -> None:
    """The key -> shape entries of an official ``nn.Conv2d``."""
    shapes[name + '.weight'] = (out_ch, in_ch, k, k)
    if bias:
        shapes[name + '.bias'] = (out_ch, )


def read_key_list(path: str) -> Shapes:
    """Key -> shape of an official state dict listed one key a line (``key 3,4,1,1``; ``#``
    comments), as in ``tests/data/*_official_keys_*.txt``."""
    shapes = {}
    with open(path) as f:
        for line in f:
            if line.startswith('#'):
                continue
            key, shape = line.rstrip('\n').split(' ')
            shapes[key] = tuple(int(v) for v in shape.split(',')) if shape else ()
    return shapes


def meta_state_dict(shapes: Shapes) -> Dict[str, torch.Tensor]:
    """Tensors of these shapes without storage (layout checks of full-size archs)."""
    return {k: torch.empty(s, device='meta') for k, s in shapes.items()}


def random_state_dict(shapes: Shapes, seed: int = 0,
                      dtype: torch.dtype = torch.float64) -> Dict[str, torch.Tensor]:
    """Random weights giving O(1) activations and non-uniform attention through a convolutional
    H-MHSA network: norms (BatchNorm or GroupNorm: the prefixes with a 1-D weight) near identity
    with non-trivial statistics, small biases, half-unit-gain weights (so that the residual
    stream stays O(1) through 18 blocks)."""
    gen = torch.Generator().manual_seed(seed)

    def uniform(shape, low, high):
        return torch.rand(shape, generator=gen, dtype=dtype) * (high - low) + low

    norms = {k[:-len('.weight')] for k, s in shapes.items()
             if k.endswith('.weight') and len(s) == 1}
    ranges = dict(weight=(.5, 1.5), bias=(-.3, .3), running_mean=(-.3, .3), running_var=(.5, 2.))
    sd = {}
    for key, shape in shapes.items():
        prefix, suffix = key.rsplit('.', 1)
        if suffix == 'num_batches_tracked':
            sd[key] = torch.tensor(0)
        elif prefix in norms:
            sd[key] = uniform(shape, *ranges[suffix])
        elif suffix == 'bias':
            sd[key] = uniform(shape, -.1, .1)
        else:
            sd[key] = torch.randn(shape, generator=gen, dtype=dtype) * .5 / math.sqrt(
                math.prod(shape[1:]))
    return sd


def shifted(state_dict: dict, by: float = 1.) -> dict:
    """Other weights of the same layout (an EMA copy that must not be taken)."""
    return {k: v + by if v.is_floating_point() else v for k, v in state_dict.items()}


def deit_checkpoint(weights: dict, ema: Optional[dict] = None) -> dict:
    """What DeiT's ``main.py`` (followed by PVT, TransCNN and HAT-Net) saves after an epoch:
    optimizer, timm scheduler, AMP scaler and an ``argparse.Namespace``."""
    from timm.scheduler import CosineLRScheduler
    params = [nn.Parameter(v.clone()) for v in weights.values() if v.is_floating_point()]
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05)
    sum(p.sum() for p in params).backward()
    optimizer.step()
    scheduler = CosineLRScheduler(optimizer, t_initial=300, warmup_t=5, warmup_lr_init=1e-6)
    args = argparse.Namespace(model='transcnn_small', batch_size=128, epochs=300, lr=1e-3,
                              input_size=256, drop_path=0.1, model_ema=ema is not None,
                              device='cuda', output_dir='checkpoints', dist_url='env://',
                              scale=[0.08, 1.0], resume='', distributed=True, gpu=0)
    checkpoint = dict(model=weights, optimizer=optimizer.state_dict(),
                      lr_scheduler=scheduler.state_dict(), epoch=299,
                      scaler=torch.amp.GradScaler('cpu').state_dict(), args=args)
    if ema is not None:
        checkpoint['model_ema'] = ema
    return checkpoint


class CodeRunner:
    """Unpickling this runs ``touch MARKER``: what a malicious checkpoint does."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}', ))
