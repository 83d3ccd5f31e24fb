import torch.nn as nn


class Mlp(nn.Module):
    """Transformer feed-forward: fc1 -> activation -> dropout -> fc2 -> dropout (timm key names).

    Args:
        in_features (int): Input and, by default, output channels.
        hidden_features (int): Hidden channels.
        out_features (int, optional): Output channels; default ``in_features``.
        act_layer (type): Activation class. Default: nn.GELU.
        drop (float): Dropout after the activation and after fc2.
    """

    def __init__(self, in_features, hidden_features, out_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        out_features = out_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))
