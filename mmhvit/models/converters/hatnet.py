"""Official HAT-Net checkpoints (``HAT_Net.py``, yun-liu/HAT-Net) -> our keys.

Paper: "Vision Transformers with Hierarchical Attention", Liu et al., Machine Intelligence Research
2024, https://arxiv.org/abs/2106.03180.
"""
import re
from typing import Dict

import torch

from .hmhsa import (
    OFFICIAL_STEM_ATTN_RULES,
    convert_official_hmhsa,
    hmhsa_release,
    is_official_hmhsa_layout,
)

# The IRB's Sequentials hold other layers at the same indices as TransCNN's:
# conv1 = [GN, 1x1, SiLU], conv2 = [dw, SiLU], conv3 = [1x1, GN].
OFFICIAL_RULES = OFFICIAL_STEM_ATTN_RULES + [
    (r'^blocks\.(\d+)\.(\d+)\.conv\.conv1\.0\.', r'stages.\1.blocks.\2.ffn.pre_norm.'),
    (r'^blocks\.(\d+)\.(\d+)\.conv\.conv1\.1\.', r'stages.\1.blocks.\2.ffn.conv1.'),
    (r'^blocks\.(\d+)\.(\d+)\.conv\.conv([23])\.0\.', r'stages.\1.blocks.\2.ffn.conv\3.'),
    (r'^blocks\.(\d+)\.(\d+)\.conv\.conv3\.1\.', r'stages.\1.blocks.\2.ffn.norm3.'),
]
# Built by the official Attention but never used by its forward.
UNUSED = re.compile(r'^blocks\.\d+\.\d+\.attn\.proj_norm\.')


def convert_hatnet_checkpoint(state_dict: Dict[str, torch.Tensor],
                              with_head: bool = False) -> Dict[str, torch.Tensor]:
    """Convert an official HAT-Net state dict to :class:`~mmhvit.models.backbones.HATNet`'s keys.

    Our own keys pass through unchanged; ``attn.proj_norm`` (unused by the official forward) is
    left out. The official classifier (``classifier.1``) becomes ``head.fc`` with ``with_head``,
    else it is left out; keys that no rule knows stay as they are, so that loading reports them as
    unexpected. A TransCNN checkpoint (same key names, other layers) is refused with one clear
    error. DDP (``module.``) and classifier (``backbone.``) prefixes are removed before this by
    the backbone's loader (:func:`~mmhvit.models.checkpoint.unwrap_state_dict`).
    """
    return convert_official_hmhsa(state_dict, 'HAT-Net', OFFICIAL_RULES, with_head, UNUSED)


def is_official_hatnet(state_dict: Dict[str, torch.Tensor]) -> bool:
    """Whether a state dict has the official HAT-Net key layout (not TransCNN's)."""
    return is_official_hmhsa_layout(state_dict) and hmhsa_release(state_dict) == 'HAT-Net'
