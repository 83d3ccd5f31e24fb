"""TNT checkpoints of the official, timm and mmpretrain layouts -> our keys.

Paper: `Transformer in Transformer <https://arxiv.org/abs/2103.00112>`_ (Han et al., NeurIPS 2021);
official code ``huawei-noah/Efficient-AI-Backbones`` (``tnt_pytorch/tnt.py``). Every layout is
first renamed to the official names, then the official names to ours.
"""
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import torch

# timm block names -> the official ones; mmpretrain's are handled by mmpretrain_to_official.
_TIMM_BLOCK_NAMES = {
    'norm_in': 'inner_norm1',
    'attn_in': 'inner_attn',
    'norm_mlp_in': 'inner_norm2',
    'mlp_in': 'inner_mlp',
    'norm1_proj': 'proj_norm1',
    'proj': 'proj',
    'norm2_proj': 'proj_norm2',
    'norm_out': 'outer_norm1',
    'attn_out': 'outer_attn',
    'norm_mlp': 'outer_norm2',
    'mlp': 'outer_mlp',
}
_TIMM_TOP_NAMES = {
    'pixel_embed': 'patch_embed',
    'pixel_pos': 'inner_pos',
    'patch_pos': 'outer_pos',
    'norm1_proj': 'proj_norm1',
    'norm2_proj': 'proj_norm2',
}
# Official names -> ours, outside the blocks.
_OFFICIAL_TOP_NAMES = {
    'patch_embed.proj.': 'patch_embed.word_embed.',
    'inner_pos': 'patch_embed.word_pos_embed',
    'proj_norm1.': 'patch_embed.norm1.',
    'proj.': 'patch_embed.proj.',
    'proj_norm2.': 'patch_embed.norm2.',
    'cls_token': 'patch_embed.cls_token',
    'outer_pos': 'patch_embed.pos_embed',
}
# Official block names -> ours (``blocks.{i}.`` becomes ``stages.{s}.blocks.{j}.``).
_OFFICIAL_BLOCK_NAMES = {
    'inner_norm1.': 'inner.norm1.',
    'inner_attn.proj.': 'inner.attn.proj.',
    'inner_norm2.': 'inner.norm2.',
    'inner_mlp.': 'inner.mlp.',
    'proj_norm1.': 'word_proj.norm1.',
    'proj.': 'word_proj.proj.',
    'proj_norm2.': 'word_proj.norm2.',
    'outer_norm1.': 'outer.norm1.',
    'outer_attn.proj.': 'outer.attn.proj.',
    'outer_norm2.': 'outer.norm2.',
    'outer_mlp.': 'outer.mlp.',
    'se_layer.': 'outer.se.',
}


def detect_tnt_layout(state_dict: Dict[str, torch.Tensor]) -> str:
    """'ours', 'official', 'timm' or 'mmpretrain'; raises for anything else."""
    keys = set(state_dict)
    # (the word embedding's keys depend on the stem: a conv or the conv_stem's layers)
    if 'patch_embed.pos_embed' in keys and 'patch_embed.word_pos_embed' in keys:
        return 'ours'
    if 'outer_pos' in keys and 'patch_embed.proj.weight' in keys:
        return 'official'
    if 'patch_pos' in keys and 'pixel_embed.proj.weight' in keys:
        return 'mmpretrain' if any(k.startswith('layers.') for k in keys) else 'timm'
    raise ValueError('not a TNT checkpoint of a known layout (mmhvit, official, timm or '
                     'mmpretrain): no patch_embed.pos_embed + word_pos_embed, outer_pos + '
                     'patch_embed.proj or patch_pos + pixel_embed.proj keys; first keys: '
                     f'{sorted(keys)[:6]}')


def timm_to_official(state_dict: Dict[str, torch.Tensor]) -> 'OrderedDict[str, torch.Tensor]':
    """timm's TNT names -> the official ones; its word position map becomes tokens."""
    out = OrderedDict()
    for key, value in state_dict.items():
        match = re.match(r'blocks\.(\d+)\.([a-z0-9_]+)\.(.+)', key)
        if match:
            index, name, rest = match.groups()
            key = f'blocks.{index}.{_TIMM_BLOCK_NAMES.get(name, name)}.{rest}'
        else:
            head, _, rest = key.partition('.')
            key = _TIMM_TOP_NAMES.get(head, head) + ('.' + rest if rest else '')
        if key == 'inner_pos':  # (1, c, 4, 4) map -> (1, 16, c) tokens
            value = value.flatten(2).transpose(1, 2)
        out[key] = value
    return out


def mmpretrain_to_official(state_dict: Dict[str, torch.Tensor]
                           ) -> 'OrderedDict[str, torch.Tensor]':
    """mmpretrain's (legacy-layout) TNT -> the official names; its packed ``in_proj`` [q | k | v]
    becomes the official ``qk`` and ``v``."""
    out = OrderedDict()
    for key, value in state_dict.items():
        match = re.match(r'layers\.(\d+)\.(inner_block|outer_block|norm_proj|projection)\.(.+)',
                         key)
        if not match:
            head, _, rest = key.partition('.')
            key = {'projection': 'proj'}.get(head, _TIMM_TOP_NAMES.get(head, head)) + \
                ('.' + rest if rest else '')
            out[key] = value.flatten(2).transpose(1, 2) if key == 'inner_pos' else value
            continue
        index, part, rest = match.groups()
        out.update(_mmpretrain_block_tensor(f'blocks.{index}.', part, rest, key, value))
    return out


def _mmpretrain_block_tensor(prefix, part, rest, key, value):
    if part in ('norm_proj', 'projection'):
        name = {'norm_proj': 'proj_norm1', 'projection': 'proj'}[part]
        return {f'{prefix}{name}.{rest}': value}
    side = 'inner' if part == 'inner_block' else 'outer'
    if rest in ('attn.attn.in_proj_weight', 'attn.attn.in_proj_bias'):
        dims = value.shape[0] // 3
        kind = rest.rsplit('_', 1)[-1]
        return {f'{prefix}{side}_attn.qk.{kind}': value[:2 * dims],
                f'{prefix}{side}_attn.v.{kind}': value[2 * dims:]}
    for old, new in (('norm_attn.', 'norm1.'), ('norm_ffn.', 'norm2.'),
                     ('attn.attn.out_proj.', 'attn.proj.'), ('ffn.layers.0.0.', 'mlp.fc1.'),
                     ('ffn.layers.1.', 'mlp.fc2.')):
        if rest.startswith(old):
            return {f'{prefix}{side}_{new}{rest[len(old):]}': value}
    return {key: value}  # unknown: kept, so that loading reports it


def _stage_of_block(depths: Sequence[int]) -> List[Tuple[int, int]]:
    """(stage, index in stage) of every block, in order."""
    return [(stage, j) for stage, depth in enumerate(depths) for j in range(depth)]


def official_to_ours(state_dict: Dict[str, torch.Tensor],
                     depths: Sequence[int]) -> 'OrderedDict[str, torch.Tensor]':
    """Official names -> ours: blocks into stages, ``qk`` and ``v`` into one ``qkv``, the final
    norm into the stage of the last block."""
    places = _stage_of_block(depths)
    last_stage = places[-1][0]
    out = OrderedDict()
    for key, value in state_dict.items():
        match = re.match(r'blocks\.(\d+)\.(.+)', key)
        if match is None:
            if key.startswith('norm.'):
                key = f'stages.{last_stage}.norm.' + key[len('norm.'):]
            for old, new in _OFFICIAL_TOP_NAMES.items():
                if key == old or key.startswith(old) and old.endswith('.'):
                    key = new + key[len(old):]
                    break
            out[key] = value
            continue
        index, rest = int(match.group(1)), match.group(2)
        if index >= len(places):
            out[key] = value  # more blocks than this model: reported as unexpected
            continue
        prefix = 'stages.{}.blocks.{}.'.format(*places[index])
        out.update(_official_block_tensor(state_dict, prefix, index, rest, value))
    return out


def _official_block_tensor(state_dict, prefix, index, rest, value):
    qkv = re.match(r'(inner|outer)_attn\.(qk|v)\.(weight|bias)$', rest)
    if qkv:
        side, part, kind = qkv.groups()
        if part == 'v':
            return {}  # taken with qk
        v = state_dict[f'blocks.{index}.{side}_attn.v.{kind}']
        return {f'{prefix}{side}.attn.qkv.{kind}': torch.cat([value, v])}
    for old, new in _OFFICIAL_BLOCK_NAMES.items():
        if rest.startswith(old):
            return {prefix + new + rest[len(old):]: value}
    return {prefix + rest: value}


def convert_tnt_checkpoint(state_dict: Dict[str, torch.Tensor],
                           depths: Optional[Sequence[int]] = None,
                           with_head: bool = False) -> 'OrderedDict[str, torch.Tensor]':
    """Convert a TNT state dict of the official, timm or mmpretrain layout to
    :class:`~mmhvit.models.backbones.TNT`'s keys.

    ``depths`` (blocks per stage) places the official flat ``blocks.{i}`` into
    ``stages.{s}.blocks.{j}``; default: the checkpoint's blocks split evenly over the four stages
    (3, 3, 3, 3 for the official models). With ``with_head`` the classifier becomes
    ``head.weight``/``head.bias`` (an MMPretrain classifier's ``head.fc.*`` too), else it is left
    out; the official file's unused ``outer_tokens`` is dropped. Our own keys pass through.
    Legacy-layout weights keep their legacy shapes: load them into ``TNT(legacy=True)``.
    """
    if any(k.startswith('backbone.') for k in state_dict):
        state_dict = OrderedDict((k[len('backbone.'):] if k.startswith('backbone.') else k, v)
                                 for k, v in state_dict.items())
    state_dict = OrderedDict(('head.' + k[len('head.fc.'):] if k.startswith('head.fc.') else k, v)
                             for k, v in state_dict.items() if k != 'outer_tokens'
                             and (with_head or not k.startswith('head.')))
    layout = detect_tnt_layout(state_dict)
    if layout == 'ours':
        return state_dict
    if layout == 'timm':
        state_dict = timm_to_official(state_dict)
    elif layout == 'mmpretrain':
        state_dict = mmpretrain_to_official(state_dict)
    if depths is None:
        total = len({k.split('.')[1] for k in state_dict if k.startswith('blocks.')})
        depths = [total * (i + 1) // 4 - total * i // 4 for i in range(4)]
    return official_to_ours(state_dict, depths)


def describe_tnt_checkpoint(state_dict: Dict[str, torch.Tensor], family) -> str:
    """The arch a converted state dict was made for: a name of ``family.arch_zoo`` (``family``:
    :class:`~mmhvit.models.backbones.TNT`) or the dims and depth, marked ``(legacy)`` for the
    legacy layout."""
    try:
        inner_dims = state_dict['patch_embed.word_pos_embed'].shape[-1]
        embed_dims = state_dict['patch_embed.pos_embed'].shape[-1]
    except KeyError:
        return 'unknown (no patch_embed.word_pos_embed / pos_embed)'
    depth = len({tuple(k.split('.')[1:4:2]) for k in state_dict if k.startswith('stages.')
                 and '.blocks.' in k})
    marks = ' (legacy)' if any(k.endswith('word_proj.proj.bias') for k in state_dict) else ''
    if 'patch_embed.word_embed.0.conv.weight' in state_dict:
        marks += ' (conv stem)'
    for name, arch in family.arch_zoo.items():
        if len(name) > 2 and (arch['inner_dims'], arch['embed_dims'],
                              sum(arch['depths'])) == (inner_dims, embed_dims, depth):
            return name + marks
    return f'custom (inner_dims={inner_dims}, embed_dims={embed_dims}, {depth} blocks){marks}'
