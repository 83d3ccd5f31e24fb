"""What the official TransCNN and HAT-Net checkpoints share: one key layout, two releases.

Both releases (yun-liu/HAT-Net: ``TransCNN.py`` at commit 0bd7463 and ``HAT_Net.py``) name their
stem, H-MHSA blocks and downsamples alike, but the same name can be another layer in each (the
IRB's ``conv.conv1.0`` is a conv in TransCNN and a GroupNorm in HAT-Net). So the release is read
from markers (:func:`hmhsa_release`), never guessed, and a checkpoint of one release is refused by
the other's converter with one clear error.
"""
import re
from collections import OrderedDict
from typing import Dict, Optional

import torch
from mmengine.logging import print_log

# Official names -> ours of the stem and attention, in both releases; 1x1 conv weights
# [out, in, 1, 1] become Linear [out, in].
OFFICIAL_STEM_ATTN_RULES = [
    (r'^patch_embed\.0\.', 'patch_embed.conv1.'),
    (r'^patch_embed\.1\.', 'patch_embed.norm.'),
    (r'^patch_embed\.3\.', 'patch_embed.conv2.'),
    (r'^blocks\.(\d+)\.(\d+)\.attn\.', r'stages.\1.blocks.\2.attn.'),
]
_ATTN_LINEAR = re.compile(r'\.attn\.(qkv|q|kv|proj)\.weight$')
_OFFICIAL_HEAD = 'classifier.1.'
# What tells the two releases apart, in their official layouts and in ours: the layers, never the
# norm type (``norm_cfg`` may give either family BatchNorm or GroupNorm). TransCNN has a downsample
# with a residual branch and IRB norms after its convs (the official ``conv.conv1.0`` is a conv);
# HAT-Net has ``attn.proj_norm`` (official files only), an IRB norm on its input (``ffn.pre_norm``
# here; the official ``conv.conv1.0`` is that GroupNorm, 1-D).
_TRANSCNN_MARKERS = re.compile(r'(^ds\d\.residual\.)|(\.downsample\.residual\.)|(\.ffn\.norm1\.)')
_HATNET_MARKERS = re.compile(r'(\.attn\.proj_norm\.)|(\.ffn\.pre_norm\.)')
_OFFICIAL_IRB_CONV1 = re.compile(r'^blocks\.\d+\.\d+\.conv\.conv1\.0\.weight$')
_BACKBONES = {'TransCNN': 'mmhvit.TransCNN', 'HAT-Net': 'mmhvit.HATNet'}


def is_official_hmhsa_layout(state_dict: Dict[str, torch.Tensor]) -> bool:
    """Whether a state dict has the official key layout of TransCNN or HAT-Net (one layout, told
    apart by :func:`hmhsa_release`)."""
    return any(k.startswith(('patch_embed.0.', 'blocks.0.0.', 'ds2.')) for k in state_dict)


def hmhsa_release(state_dict: Dict[str, torch.Tensor]) -> Optional[str]:
    """'TransCNN' or 'HAT-Net': the release an official or converted state dict comes from; None
    when its keys tell neither (e.g. no block and no downsample in it)."""
    transcnn = hatnet = False
    for key, value in state_dict.items():
        if _TRANSCNN_MARKERS.search(key):
            transcnn = True
        elif _HATNET_MARKERS.search(key):
            hatnet = True
        elif _OFFICIAL_IRB_CONV1.match(key):
            transcnn, hatnet = transcnn or value.dim() == 4, hatnet or value.dim() == 1
    if transcnn and hatnet:
        raise ValueError('the checkpoint mixes TransCNN keys (residual downsample branches, IRB '
                         'post-norms) with HAT-Net keys (attn.proj_norm, IRB pre-norms)')
    return 'TransCNN' if transcnn else 'HAT-Net' if hatnet else None


def check_hmhsa_release(state_dict: Dict[str, torch.Tensor], expected: str) -> None:
    """One clear error when a state dict comes from the other release than ``expected``."""
    release = hmhsa_release(state_dict)
    if release is not None and release != expected:
        raise ValueError(f'this is a {release} checkpoint, not a {expected} one (same key names, '
                         f'different layers): load it into {_BACKBONES[release]}, or use '
                         f'{expected} weights')


def convert_official_hmhsa(state_dict: Dict[str, torch.Tensor], release: str, rules,
                           with_head: bool, drop: Optional[re.Pattern] = None
                           ) -> Dict[str, torch.Tensor]:
    """The conversion both releases share: an official state dict to our keys.

    Args:
        state_dict: An official state dict, or one of ours (passed through unchanged).
        release: 'TransCNN' or 'HAT-Net': a checkpoint of the other release is refused with one
            clear error.
        rules: (pattern, replacement) pairs, official -> our names of the stem and blocks; the
            first that matches a key renames it.
        with_head: Keep the classifier (``classifier.1``) as ``head.fc``; else it is left out (a
            backbone has no head).
        drop: Keys left out (tensors that the official forward never uses).

    Returns:
        Our keys; ``dsN`` becomes ``stages.{N-1}.downsample``, keys no rule knows stay as they
        are (loading then reports them as unexpected).
    """
    check_hmhsa_release(state_dict, release)
    if not is_official_hmhsa_layout(state_dict):
        return state_dict
    converted = OrderedDict()
    dropped, unused = [], []
    for key, value in state_dict.items():
        if key.startswith(_OFFICIAL_HEAD):
            if with_head:
                converted['head.fc.' + key[len(_OFFICIAL_HEAD):]] = value
            else:
                dropped.append(key)
            continue
        if drop is not None and drop.search(key):
            unused.append(key)
            continue
        new_key = key
        downsample = re.match(r'^ds(\d+)\.', key)
        if downsample:
            # dsN sits between stages N-1 and N (1-based): ours is stages.{N-1}.downsample.
            new_key = f'stages.{int(downsample.group(1)) - 1}.downsample.' + key[downsample.end():]
        else:
            for pattern, repl in rules:
                new_key, hits = re.subn(pattern, repl, key)
                if hits:
                    break
        if _ATTN_LINEAR.search(new_key) and value.dim() == 4:
            value = value.flatten(1)
        converted[new_key] = value
    if dropped:
        print_log(f'{release} converter: left out the classifier {dropped} (not part of a '
                  f'backbone)', logger='current')
    if unused:
        print_log(f'{release} converter: left out {len(unused)} tensors that the official forward '
                  f'never uses, e.g. {unused[:2]}', logger='current')
    return converted


def describe_hmhsa_checkpoint(state_dict: Dict[str, torch.Tensor], family) -> str:
    """The arch a converted TransCNN / HAT-Net state dict was made for.

    Args:
        state_dict: Our keys (converted).
        family: The backbone class (:class:`~mmhvit.models.backbones.TransCNN` or
            :class:`~mmhvit.models.backbones.HATNet`) whose ``arch_zoo`` names the arch.

    Returns:
        A zoo name of ``family``, or the dims / depths / mlp ratios / kernels read from the keys.
    """
    try:
        dims = [state_dict['patch_embed.conv2.weight'].shape[0]] + [
            state_dict[f'stages.{i}.downsample.conv.weight'].shape[0] for i in (1, 2, 3)
        ]
    except KeyError:
        return f'unknown (not a {family.__name__} checkpoint)'
    depths, mlp_ratio, kernels = [0] * 4, [0] * 4, [0] * 4
    for key, value in state_dict.items():
        found = re.match(r'^stages\.(\d)\.blocks\.(\d+)\.ffn\.conv([12])\.weight$', key)
        if found:
            stage = int(found.group(1))
            depths[stage] = max(depths[stage], int(found.group(2)) + 1)
            if found.group(3) == '1':
                mlp_ratio[stage] = value.shape[0] // dims[stage]
            else:
                kernels[stage] = value.shape[-1]
    for name in family.arch_zoo:
        arch = family.parse_arch(name)
        if (arch['embed_dims'], arch['depths'], arch['mlp_ratio'],
                arch['kernel_sizes']) == (dims, depths, mlp_ratio, kernels):
            return name
    return f'embed_dims {dims}, depths {depths}, mlp_ratio {mlp_ratio}, kernel_sizes {kernels}'
