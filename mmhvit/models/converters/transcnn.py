"""Official TransCNN checkpoints (``TransCNN.py``, yun-liu/HAT-Net @0bd7463) -> our keys.

Paper: "Transformer in Convolutional Neural Networks", Liu et al., 2021,
https://arxiv.org/abs/2106.03180.
"""
from typing import Dict

import torch

from .hmhsa import OFFICIAL_STEM_ATTN_RULES, convert_official_hmhsa

# The IRB's Sequentials: conv1 = [1x1, BN, SiLU], conv2 = [dw, BN, SiLU], conv3 = [1x1, BN].
OFFICIAL_RULES = OFFICIAL_STEM_ATTN_RULES + [
    (r'^blocks\.(\d+)\.(\d+)\.conv\.conv([123])\.0\.', r'stages.\1.blocks.\2.ffn.conv\3.'),
    (r'^blocks\.(\d+)\.(\d+)\.conv\.conv([123])\.1\.', r'stages.\1.blocks.\2.ffn.norm\3.'),
]


def convert_transcnn_checkpoint(state_dict: Dict[str, torch.Tensor],
                                with_head: bool = False) -> Dict[str, torch.Tensor]:
    """Convert an official TransCNN state dict to :class:`~mmhvit.models.backbones.TransCNN`'s
    keys.

    Our own keys pass through unchanged. The official classifier (``classifier.1``) becomes
    ``head.fc`` with ``with_head``, else it is left out (a backbone has no head); keys that no rule
    knows stay as they are, so that loading reports them as unexpected. A HAT-Net checkpoint
    (official or converted) is refused with one clear error.
    """
    return convert_official_hmhsa(state_dict, 'TransCNN', OFFICIAL_RULES, with_head)
