"""timm NesT checkpoints (``nest_*_jx`` carry the official JAX weights) -> our keys.

Paper: `Nested Hierarchical Transformer <https://arxiv.org/abs/2105.12723>`_ (Zhang et al.,
AAAI 2022); official code ``google-research/nested-transformer``.
"""
import re
from collections import OrderedDict
from typing import Dict, Optional, Sequence

import torch

OFFICIAL_LEVELS = 3  # the ImageNet model's levels (strides 4, 8, 16)
OFFICIAL_HEAD_DIM = 32  # every official / timm NesT variant: 96 / 3, 128 / 4, ... channels
# The final norm before timm's head is the out_norm of the last ImageNet level.
FINAL_NORM = f'stages.{OFFICIAL_LEVELS - 1}.out_norm.'
RULES = [
    (r'^levels\.(\d+)\.transformer_encoder\.', r'stages.\1.blocks.'),
    (r'^levels\.(\d+)\.pool\.', r'stages.\1.downsample.'),
    (r'^levels\.(\d+)\.pos_embed$', r'stages.\1.pos_embed'),
    (r'^norm\.', FINAL_NORM),
]
_TIMM_ATTN_PROJ = re.compile(r'^levels\.(\d+)\.transformer_encoder\.\d+\.attn\.proj\.weight$')


def _head_major_proj(value: torch.Tensor, heads: int) -> torch.Tensor:
    """timm's attention hands ``attn.proj`` its channels ordered (head_dim, heads), and its
    converted official weights follow that order; ours are head-major (heads, head_dim)."""
    dims = value.shape[1]
    if heads <= 0 or dims % heads:
        return value
    return value.reshape(value.shape[0], dims // heads, heads).transpose(1, 2).reshape(
        value.shape[0], dims)


def convert_nest_checkpoint(state_dict: Dict[str, torch.Tensor],
                            num_heads: Optional[Sequence[int]] = None,
                            with_head: bool = False) -> 'OrderedDict[str, torch.Tensor]':
    """Convert a timm NesT state dict to :class:`~mmhvit.models.backbones.NesT`'s keys.

    timm's ``attn.proj`` input columns are permuted to head-major order, which needs the heads
    per level: ``num_heads`` or, by default, dims / 32 as in every official variant. Our own keys
    pass through unchanged. timm's classifier (``head.weight``/``head.bias``) is dropped, or with
    ``with_head`` renamed to mmpretrain's ``LinearClsHead`` keys ``head.fc.weight``/``.bias``.
    """
    converted = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith('head.'):
            if with_head:
                converted['head.fc.' + key.split('.')[-1]] = value
            continue
        timm_proj = _TIMM_ATTN_PROJ.match(key)
        if timm_proj:
            level = int(timm_proj.group(1))
            heads = num_heads[level] if num_heads is not None and level < len(num_heads) \
                else value.shape[1] // OFFICIAL_HEAD_DIM
            value = _head_major_proj(value, heads)
        for pattern, repl in RULES:
            key, hits = re.subn(pattern, repl, key)
            if hits:
                break
        converted[key] = value
    return converted


def describe_nest_checkpoint(state_dict: Dict[str, torch.Tensor], family) -> str:
    """Name the NesT arch a (timm or our) state dict was made for, e.g. ``'tiny'``.

    ``family`` is the backbone class (:class:`~mmhvit.models.backbones.NesT`) whose ``arch_zoo``
    names the arch; a custom arch is described by its dims and depths.
    """
    state_dict = convert_nest_checkpoint(state_dict)
    dims, depths = [], []
    for i in range(OFFICIAL_LEVELS):
        pos = state_dict.get(f'stages.{i}.pos_embed')
        if pos is None:
            break
        dims.append(int(pos.shape[-1]))
        depths.append(len({m.group(1) for m in (
            re.match(rf'stages\.{i}\.blocks\.(\d+)\.', k) for k in state_dict) if m}))
    if not dims:
        return 'unknown (no stages.*.pos_embed key: not a NesT checkpoint?)'
    for name, arch in family.arch_zoo.items():
        if len(name) > 1 and arch['embed_dims'][:len(dims)] == dims \
                and arch['depths'][:len(depths)] == depths:
            return name
    return f'custom(dims={dims}, depths={depths})'
