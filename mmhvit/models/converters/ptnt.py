"""PyramidTNT checkpoints: the official layout -> mmhvit's keys, and the arch a file was made for.

Pure functions over state dicts (no model is built). The official layout is the module names of
``tnt_pytorch/pyramid_tnt.py`` (huawei-noah/Efficient-AI-Backbones, `PyramidTNT
<https://arxiv.org/abs/2201.00978>`_); the released files are plain state dicts (``.pth.tar``).
"""
import re
from collections import OrderedDict
from typing import Dict

import torch

NUM_STAGES = 4
NUM_WORDS = 16  # words per sentence; the inner LayerNorms normalise them jointly

# Keys only the official layout has (ours has none of them).
_OFFICIAL_MARKERS = re.compile(r'^(outer_pos|inner_pos|norm\.|head\.|word_merges\.|'
                               r'sentence_merges\.)|\.(inner|outer)_attn\.|\.(inner|outer)_norm')
_MERGE = re.compile(r'^(word|sentence)_merges\.(\d+)\.(norm|conv\.0)\.(.+)$')
_BLOCK = re.compile(r'^stages\.(\d+)\.blocks\.(\d+)\.(.+)$')
_INNER_QKV = re.compile(r'^inner_attn\.(q|kv)\.(weight|bias)$')
# Official block names -> ours, first match wins (``stages.{i}.blocks.{j}.`` is kept).
_BLOCK_NAMES = (
    ('inner_norm1.', 'inner.norm1.'),
    ('inner_attn.proj.', 'inner.attn.proj.'),
    ('inner_norm2.', 'inner.norm2.'),
    ('inner_mlp.', 'inner.mlp.'),
    ('proj_norm1.', 'word_proj.norm1.'),
    ('proj_norm2.', 'word_proj.norm2.'),
    ('proj.', 'word_proj.proj.'),
    ('outer_norm1.', 'outer.norm1.'),
    ('outer_attn.linear.', 'outer.attn.reduce.'),
    ('outer_attn.norm.', 'outer.attn.reduce_norm.'),
    ('outer_attn.', 'outer.attn.'),  # q, kv and proj keep their names
    ('outer_norm2.', 'outer.norm2.'),
    ('outer_mlp.', 'outer.mlp.'),
)
# What other families' checkpoints hold, for the error that names the right model.
_TNT_MARKERS = ('patch_embed.proj.weight', 'pixel_embed.proj.weight',
                'patch_embed.word_embed.weight', 'patch_pos')


def detect_ptnt_layout(state_dict: Dict[str, torch.Tensor]) -> str:
    """``'official'`` or ``'ours'``; one clear error for a TNT or any other checkpoint."""
    keys = set(state_dict)
    if any(k.startswith(('patch_embed.common_conv.', 'patch_embed.outer_convs.')) for k in keys):
        return 'official' if any(_OFFICIAL_MARKERS.search(k) for k in keys) else 'ours'
    if any(k in keys for k in _TNT_MARKERS):
        raise ValueError('this is a TNT checkpoint (sentences of 16 x 16 pixels, a class '
                         'token), not a PyramidTNT one: load it into mmhvit.TNT '
                         '(convert it with: mmhvit convert tnt SRC DST)')
    raise ValueError('not a PyramidTNT checkpoint (official or mmhvit layout): it has no '
                     'patch_embed.common_conv / patch_embed.outer_convs keys (the conv stem); '
                     f'first keys: {sorted(keys)[:6]}')


def convert_ptnt_checkpoint(state_dict: Dict[str, torch.Tensor],
                            with_head: bool = False) -> 'OrderedDict[str, torch.Tensor]':
    """Convert an official PyramidTNT state dict to this package's keys.

    Our own keys pass through unchanged. The official ``q`` and ``kv`` of the inner attention
    become one ``qkv`` (rows q, k, v); the inner LayerNorms' (16 c) weights become (16, c); the
    merges move into the stage they start (``word_merges.{i}`` -> ``stages.{i+1}.word_merge``),
    the final ``norm`` into the last stage. The classifier becomes ``head.fc.*`` with
    ``with_head``, else it is left out. Keys no rule knows (the unused ``se_layer`` of an SE
    variant) stay as they are, so that loading reports them. A TNT or any other checkpoint is
    refused with one error.
    """
    if detect_ptnt_layout(state_dict) == 'ours':
        return state_dict
    converted = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith('head.'):
            if with_head:
                converted['head.fc.' + key[len('head.'):]] = value
            continue
        block = _BLOCK.match(key)
        if block:
            converted.update(_block_tensor(state_dict, *block.groups(), value))
            continue
        merge = _MERGE.match(key)
        if merge:
            kind, index, part, rest = merge.groups()
            part = 'conv' if part == 'conv.0' else part
            key = f'stages.{int(index) + 1}.{kind}_merge.{part}.{rest}'
        elif key in ('outer_pos', 'inner_pos'):
            key = 'patch_embed.' + {'outer_pos': 'pos_embed', 'inner_pos': 'word_pos_embed'}[key]
        elif key.startswith('norm.'):
            key = f'stages.{NUM_STAGES - 1}.' + key
        converted[key] = value
    return converted


def _block_tensor(state_dict, stage, index, rest, value):
    prefix = f'stages.{stage}.blocks.{index}.'
    qkv = _INNER_QKV.match(rest)
    if qkv:
        part, kind = qkv.groups()
        if part == 'kv':
            return {}  # taken with q
        kv = state_dict[f'{prefix}inner_attn.kv.{kind}']
        return {f'{prefix}inner.attn.qkv.{kind}': torch.cat([value, kv])}
    for old, new in _BLOCK_NAMES:
        if rest.startswith(old):
            if old in ('inner_norm1.', 'inner_norm2.'):
                value = value.reshape(NUM_WORDS, -1)
            return {prefix + new + rest[len(old):]: value}
    return {prefix + rest: value}  # unknown: kept, so that loading reports it


def describe_ptnt_checkpoint(state_dict: Dict[str, torch.Tensor], family) -> str:
    """The arch a converted state dict was made for: a zoo name of ``family`` (the backbone
    class) or its widths and depths."""
    try:
        embed_dims = [state_dict['patch_embed.pos_embed'].shape[-1]]
        inner_dims = [state_dict['patch_embed.word_pos_embed'].shape[-1]]
    except KeyError:
        return 'unknown (no patch_embed.pos_embed / word_pos_embed: not a PyramidTNT checkpoint?)'
    for i in range(1, NUM_STAGES):
        conv = state_dict.get(f'stages.{i}.sentence_merge.conv.weight')
        words = state_dict.get(f'stages.{i}.word_merge.conv.weight')
        if conv is None or words is None:
            break
        embed_dims.append(conv.shape[0])
        inner_dims.append(words.shape[0])
    depths = [0] * len(embed_dims)
    for key in state_dict:
        block = _BLOCK.match(key)
        if block and int(block.group(1)) < len(depths):
            stage = int(block.group(1))
            depths[stage] = max(depths[stage], int(block.group(2)) + 1)
    for name in family.arch_zoo:
        arch = family.parse_arch(name)
        stages = len(embed_dims)
        if len(name) > 2 and (arch['embed_dims'][:stages], arch['inner_dims'][:stages],
                              arch['depths'][:stages]) == (embed_dims, inner_dims, depths):
            return name
    return f'custom (embed_dims={embed_dims}, inner_dims={inner_dims}, depths={depths})'
