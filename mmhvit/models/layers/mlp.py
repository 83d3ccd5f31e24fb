from typing import Optional

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer

from .lean import lean_layer


class Mlp(nn.Module):
    """Transformer feed-forward: fc1 -> activation -> dropout -> fc2 -> dropout (timm key names).

    Args:
        embed_dims (int): Input and output channels.
        hidden_dims (int): Hidden channels.
        act_cfg (dict): Activation. Default: GELU.
        drop_rate (float): Dropout after the activation and after fc2.

    ``forward(x, pre_norm)`` normalises ``x`` first (the transformer layer's norm2). With ``lean``
    (default), backward keeps only ``x`` and recomputes fc2's input from it, fc1 included: the
    hidden tokens are the largest tensor of the layer
    (:func:`~mmhvit.models.layers.lean.lean_layer`).
    """

    def __init__(self, embed_dims: int, hidden_dims: int, act_cfg: dict = dict(type='GELU'),
                 drop_rate: float = 0.):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.act = build_activation_layer(act_cfg)
        self.drop1 = nn.Dropout(drop_rate)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop2 = nn.Dropout(drop_rate)
        self.lean = True

    def forward(self, x: torch.Tensor, pre_norm: Optional[nn.Module] = None) -> torch.Tensor:
        return self.drop2(lean_layer([pre_norm, self.fc1, self.act, self.drop1], self.fc2, x,
                                     self.lean))
