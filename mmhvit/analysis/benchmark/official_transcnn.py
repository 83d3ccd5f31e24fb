"""The official TransCNN's computation, restated for speed comparisons (not a copy of its code).

``tools/analysis_tools/benchmark.py --sections speed`` compares our TransCNN with the released
``TransCNN.py`` (yun-liu/HAT-Net) when given its path (``--official-transcnn``); without one it
times this module, which holds the same parameters under the official key names (1x1 convolutions,
NCHW BatchNorm, so an official state dict loads as it is) and computes the official forward the way
the released code does: NCHW maps throughout, windows cut by reshape/permute, plain matmul + softmax
attention, in-place SiLU. Like the official code it needs sides that are multiples of 128 (32 x grid
8 / 2 at stride 8: every window and pooled cell whole). ``tests/test_benchmark.py`` checks that it
gives our TransCNN's logits on the same weights.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

KERNEL_SIZES = (5, 3, 5, 3)


def conv_bn(in_ch: int, out_ch: int, kernel: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_ch, out_ch, kernel, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(out_ch))


def heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v on (..., N, d) tensors."""
    return (q @ k.transpose(-2, -1) * q.shape[-1]**-0.5).softmax(dim=-1) @ v


class Attention(nn.Module):

    def __init__(self, dim: int, heads: int, grid: int, ratio: int):
        super().__init__()
        self.heads, self.grid, self.ratio = heads, grid, ratio
        self.norm = nn.BatchNorm2d(dim)
        self.qkv = nn.Conv2d(dim, 3 * dim, 1)
        self.proj = nn.Conv2d(dim, dim, 1)
        if grid > 1:
            self.grid_norm = nn.BatchNorm2d(dim)
            self.ds_norm = nn.BatchNorm2d(dim)
            self.q = nn.Conv2d(dim, dim, 1)
            self.kv = nn.Conv2d(dim, 2 * dim, 1)

    def split(self, x: torch.Tensor, parts: int) -> torch.Tensor:
        """(B, parts * C, H, W) -> (parts, B, heads, H * W, d)."""
        batch, channels, height, width = x.shape
        d = channels // parts // self.heads
        return x.reshape(batch, parts, self.heads, d, height * width).permute(1, 0, 2, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        qkv = self.qkv(self.norm(x))
        if self.grid == 1:
            q, k, v = self.split(qkv, 3)
            out = heads_attention(q, k, v).transpose(-2, -1).reshape(x.shape)
            return self.proj(out)
        g, d = self.grid, channels // self.heads
        rows, cols = height // g, width // g
        # (3, B, heads, d, rows, g, cols, g) -> (3, B * heads * rows * cols, g * g, d)
        windows = qkv.reshape(batch, 3, self.heads, d, rows, g, cols, g)
        windows = windows.permute(1, 0, 2, 4, 6, 5, 7, 3).reshape(3, -1, g * g, d)
        local = heads_attention(*windows).reshape(batch, self.heads, rows, cols, g, g, d)
        local = local.permute(0, 1, 6, 2, 4, 3, 5).reshape(x.shape)
        y = self.grid_norm(x + local)
        q = self.q(y).reshape(batch, self.heads, d, -1).transpose(-2, -1)
        k, v = self.split(self.kv(self.ds_norm(F.avg_pool2d(y, self.ratio))), 2)
        out = heads_attention(q, k, v).transpose(-2, -1).reshape(x.shape)
        return self.proj(out + y)


class InvertedResidual(nn.Module):

    def __init__(self, dim: int, hidden: int, kernel: int):
        super().__init__()
        self.conv1 = nn.Sequential(*conv_bn(dim, hidden), nn.SiLU(inplace=True))
        self.conv2 = nn.Sequential(*conv_bn(hidden, hidden, kernel, hidden), nn.SiLU(inplace=True))
        self.conv3 = conv_bn(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(self.conv2(self.conv1(x)))


class Block(nn.Module):

    def __init__(self, dim: int, heads: int, grid: int, ratio: int, expansion: int, kernel: int):
        super().__init__()
        self.attn = Attention(dim, heads, grid, ratio)
        self.conv = InvertedResidual(dim, dim * expansion, kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.conv(x)


class Downsample(nn.Module):

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = nn.Conv2d(in_dim, out_dim, 3, stride=2, padding=1)
        self.residual = nn.Conv2d(in_dim, out_dim, 1)
        self.norm1 = nn.BatchNorm2d(out_dim)
        self.norm2 = nn.BatchNorm2d(out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(
            self.norm1(self.conv(x)) + self.norm2(self.residual(F.max_pool2d(x, 2))), inplace=True)


class OfficialTransCNN(nn.Module):
    """An ImageNet TransCNN with the official key names, from one of our arch dicts
    (``TransCNN.arch_zoo``); the official head_dim is ``embed_dims // num_heads``."""

    def __init__(self, arch: dict, num_classes: int = 1000):
        super().__init__()
        dims = arch['embed_dims']
        self.patch_embed = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.SiLU(inplace=True),
            nn.Conv2d(16, dims[0], 3, stride=2, padding=1))
        self.blocks = nn.ModuleList(
            nn.ModuleList(
                Block(dims[s], arch['num_heads'][s], arch['grid_sizes'][s], arch['ds_ratios'][s],
                      arch['mlp_ratio'][s], KERNEL_SIZES[s]) for _ in range(arch['depths'][s]))
            for s in range(4))
        for s in (2, 3, 4):
            self.add_module(f'ds{s}', Downsample(dims[s - 2], dims[s - 1]))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(dims[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        for stage, blocks in enumerate(self.blocks):
            if stage:
                x = getattr(self, f'ds{stage + 1}')(x)
            for block in blocks:
                x = block(x)
        return self.classifier(x.mean(dim=(2, 3)))
