import torch.nn as nn
from mmcv.cnn import build_activation_layer


class Mlp(nn.Module):
    """Transformer feed-forward: fc1 -> activation -> dropout -> fc2 -> dropout (timm key names).

    Args:
        embed_dims (int): Input and output channels.
        hidden_dims (int): Hidden channels.
        act_cfg (dict): Activation. Default: GELU.
        drop_rate (float): Dropout after the activation and after fc2.
    """

    def __init__(self, embed_dims: int, hidden_dims: int, act_cfg: dict = dict(type='GELU'),
                 drop_rate: float = 0.):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.act = build_activation_layer(act_cfg)
        self.drop1 = nn.Dropout(drop_rate)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop2 = nn.Dropout(drop_rate)

    def forward(self, x):
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))
