"""TransCNN's and HAT-Net's official computation, restated in plain torch (not a copy of its code).

The official files: ``TransCNN.py`` (yun-liu/HAT-Net @0bd7463) and ``HAT_Net.py`` (yun-liu/HAT-Net).
Every function works on an official-format state dict (its keys, 1x1 conv weights, NCHW) and one
of our arch dicts (``TransCNN.arch_zoo`` / ``HATNet.arch_zoo`` style: ``embed_dims``, ``depths``,
``num_heads``, ``mlp_ratio``, ``grid_sizes``, ``ds_ratios``, optionally ``kernel_sizes``).
TransCNN normalises with BatchNorm; HAT-Net with GroupNorm (1 group, eps 1e-6) over the whole map,
a GroupNorm-first inverted residual and a plain strided-conv downsampling.

Windows and pooled cells are cut as the official code cuts them (reshape / average pooling) where
the map divides into them; elsewhere by slicing, so that at map borders they hold only the pixels
that exist. For inputs the official code accepts (TransCNN: multiples of 128; HAT-Net: 224) this is
exactly its computation, and for other sizes it is the computation in which padded keys are absent.

:class:`OfficialTransCNN` and :class:`OfficialHATNet` hold the same parameters under the official
key names (an official state dict loads as it is) and run this computation: the references of the
speed benchmark when the released files are not at hand.
"""
import functools
import math
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .state_dicts import Shapes, add_conv_shapes, random_state_dict

TRANSCNN_KERNELS = [5, 3, 5, 3]  # fixed in the official TransCNN
HATNET_KERNELS = [3, 3, 3, 3]  # HAT-Net's default (medium: 5, 3, 5, 3)
Weights = Dict[str, torch.Tensor]


# --- the official layouts ------------------------------------------------------------------------
def _norm_shapes(shapes: Shapes, name: str, ch: int, batch_norm: bool) -> None:
    shapes[name + '.weight'] = shapes[name + '.bias'] = (ch, )
    if batch_norm:
        shapes[name + '.running_mean'] = shapes[name + '.running_var'] = (ch, )
        shapes[name + '.num_batches_tracked'] = ()


def _transcnn_irb_shapes(conv, norm, name, dim, hidden, kernel):
    conv(name + '.conv1.0', hidden, dim, 1, bias=False)
    norm(name + '.conv1.1', hidden)
    conv(name + '.conv2.0', hidden, 1, kernel, bias=False)
    norm(name + '.conv2.1', hidden)
    conv(name + '.conv3.0', dim, hidden, 1, bias=False)
    norm(name + '.conv3.1', dim)


def _hatnet_irb_shapes(conv, norm, name, dim, hidden, kernel):
    norm(name + '.conv1.0', dim)
    conv(name + '.conv1.1', hidden, dim, 1, bias=False)
    conv(name + '.conv2.0', hidden, 1, kernel, bias=False)
    conv(name + '.conv3.0', dim, hidden, 1, bias=False)
    norm(name + '.conv3.1', dim)


def _transcnn_downsample_shapes(conv, norm, name, in_dim, out_dim):
    conv(name + '.conv', out_dim, in_dim, 3)
    conv(name + '.residual', out_dim, in_dim, 1)
    norm(name + '.norm1', out_dim)
    norm(name + '.norm2', out_dim)


def _hatnet_downsample_shapes(conv, norm, name, in_dim, out_dim):
    conv(name + '.conv', out_dim, in_dim, 3)
    norm(name + '.norm', out_dim)


def _hmhsa_shapes(arch: dict, num_classes: int, hatnet: bool) -> Shapes:
    """Key -> shape of an official TransCNN / HAT-Net state dict, in the official module order."""
    shapes = {}
    conv = functools.partial(add_conv_shapes, shapes)
    norm = functools.partial(_norm_shapes, shapes, batch_norm=not hatnet)
    irb = _hatnet_irb_shapes if hatnet else _transcnn_irb_shapes
    kernels = arch.get('kernel_sizes', HATNET_KERNELS) if hatnet else TRANSCNN_KERNELS
    dims = arch['embed_dims']
    conv('patch_embed.0', 16, 3, 3)
    norm('patch_embed.1', 16)
    conv('patch_embed.3', dims[0], 16, 3)
    for s, (dim, depth) in enumerate(zip(dims, arch['depths'])):
        for i in range(depth):
            attn = f'blocks.{s}.{i}.attn'
            norm(attn + '.norm', dim)
            conv(attn + '.qkv', 3 * dim, dim, 1)
            conv(attn + '.proj', dim, dim, 1)
            if hatnet:  # built by the official attention, never used
                norm(attn + '.proj_norm', dim)
            if arch['grid_sizes'][s] > 1:
                norm(attn + '.grid_norm', dim)
                norm(attn + '.ds_norm', dim)
                conv(attn + '.q', dim, dim, 1)
                conv(attn + '.kv', 2 * dim, dim, 1)
            irb(conv, norm, f'blocks.{s}.{i}.conv', dim, dim * arch['mlp_ratio'][s], kernels[s])
    for n in (2, 3, 4):
        (_hatnet_downsample_shapes if hatnet else _transcnn_downsample_shapes)(
            conv, norm, f'ds{n}', dims[n - 2], dims[n - 1])
    shapes['classifier.1.weight'] = (num_classes, dims[-1])
    shapes['classifier.1.bias'] = (num_classes, )
    return shapes


def transcnn_shapes(arch: dict, num_classes: int = 1000) -> Shapes:
    """Key -> shape of an official TransCNN state dict (head_dim = dim // num_heads)."""
    return _hmhsa_shapes(arch, num_classes, hatnet=False)


def hatnet_shapes(arch: dict, num_classes: int = 1000) -> Shapes:
    """Key -> shape of an official HAT-Net state dict (with the ``proj_norm`` the official
    attention builds and never uses)."""
    return _hmhsa_shapes(arch, num_classes, hatnet=True)


# --- the operations ----------------------------------------------------------------------------
def r_bn(x: torch.Tensor, sd: Weights, name: str) -> torch.Tensor:
    return F.batch_norm(x, sd[name + '.running_mean'], sd[name + '.running_var'],
                        sd[name + '.weight'], sd[name + '.bias'], False, 0., 1e-5)


def r_gn(x: torch.Tensor, sd: Weights, name: str) -> torch.Tensor:
    return F.group_norm(x, 1, sd[name + '.weight'], sd[name + '.bias'], 1e-6)


def r_conv(x: torch.Tensor, sd: Weights, name: str, **kwargs) -> torch.Tensor:
    return F.conv2d(x, sd[name + '.weight'], sd.get(name + '.bias'), **kwargs)


def r_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """Softmax attention on channel-major tokens (B, C, N); channels head-major."""
    batch, channels, n_q = q.shape
    q, k, v = (t.reshape(batch, heads, channels // heads, -1).transpose(-2, -1) for t in (q, k, v))
    weights = (q @ k.transpose(-2, -1) * (channels // heads)**-0.5).softmax(-1)
    return (weights @ v).transpose(-2, -1).reshape(batch, channels, n_q)


def r_window_attention(qkv: torch.Tensor, grid: int, heads: int) -> torch.Tensor:
    """Attention inside each grid x grid window of a (B, 3C, H, W) map; border windows hold only
    existing tokens."""
    batch, channels, height, width = qkv.shape[0], qkv.shape[1] // 3, *qkv.shape[2:]
    if height % grid == 0 and width % grid == 0:  # whole windows: the official reshape
        d, rows, cols = channels // heads, height // grid, width // grid
        windows = qkv.reshape(batch, 3, heads, d, rows, grid, cols, grid)
        q, k, v = windows.permute(1, 0, 2, 4, 6, 5, 7, 3).reshape(3, -1, grid * grid, d)
        out = (q @ k.transpose(-2, -1) * d**-0.5).softmax(-1) @ v
        out = out.reshape(batch, heads, rows, cols, grid, grid, d)
        return out.permute(0, 1, 6, 2, 4, 3, 5).reshape(batch, channels, height, width)
    out = qkv.new_zeros(batch, channels, height, width)
    for i in range(0, height, grid):
        for j in range(0, width, grid):
            window = qkv[:, :, i:i + grid, j:j + grid]
            q, k, v = window.flatten(2).chunk(3, dim=1)
            out[:, :, i:i + grid, j:j + grid] = r_attention(q, k, v, heads).reshape(
                batch, -1, *window.shape[-2:])
    return out


def r_cell_pool(x: torch.Tensor, cell: int, op: str) -> torch.Tensor:
    """Mean or max (``op`` 'mean' / 'amax') of each cell x cell cell over the pixels that exist."""
    height, width = x.shape[-2:]
    if height % cell == 0 and width % cell == 0:  # whole cells: the official pooling
        return (F.avg_pool2d if op == 'mean' else F.max_pool2d)(x, cell)
    return torch.stack([
        torch.stack([
            getattr(x[:, :, i:i + cell, j:j + cell], op)(dim=(-2, -1))
            for j in range(0, width, cell)
        ], -1) for i in range(0, height, cell)
    ], -2)


def r_hmhsa(x: torch.Tensor, sd: Weights, name: str, heads: int, grid: int, ratio: int,
            norm: Callable = r_bn) -> torch.Tensor:
    """The official H-MHSA: windowed attention, then global attention to pooled keys (grid > 1);
    global attention (grid 1). ``norm``: BatchNorm (TransCNN) or GroupNorm (HAT-Net)."""
    qkv = r_conv(norm(x, sd, name + '.norm'), sd, name + '.qkv')
    if grid == 1:
        out = r_attention(*qkv.flatten(2).chunk(3, dim=1), heads)
    else:
        y = norm(x + r_window_attention(qkv, grid, heads), sd, name + '.grid_norm')
        kv = r_conv(norm(r_cell_pool(y, ratio, 'mean'), sd, name + '.ds_norm'), sd, name + '.kv')
        q = r_conv(y, sd, name + '.q').flatten(2)
        out = r_attention(q, *kv.flatten(2).chunk(2, dim=1), heads) + y.flatten(2)
    return r_conv(out.reshape(x.shape), sd, name + '.proj')


def _transcnn_irb(x: torch.Tensor, sd: Weights, name: str, kernel: int) -> torch.Tensor:
    x = F.silu(r_bn(r_conv(x, sd, name + '.conv1.0'), sd, name + '.conv1.1'))
    x = r_conv(x, sd, name + '.conv2.0', padding=kernel // 2, groups=x.shape[1])
    x = F.silu(r_bn(x, sd, name + '.conv2.1'))
    return r_bn(r_conv(x, sd, name + '.conv3.0'), sd, name + '.conv3.1')


def _hatnet_irb(x: torch.Tensor, sd: Weights, name: str, kernel: int) -> torch.Tensor:
    x = F.silu(r_conv(r_gn(x, sd, name + '.conv1.0'), sd, name + '.conv1.1'))
    x = F.silu(r_conv(x, sd, name + '.conv2.0', padding=kernel // 2, groups=x.shape[1]))
    return r_gn(r_conv(x, sd, name + '.conv3.0'), sd, name + '.conv3.1')


def _transcnn_downsample(x: torch.Tensor, sd: Weights, name: str) -> torch.Tensor:
    # The official pool needs even sides; odd ones get -inf padding (the max of what exists).
    height, width = x.shape[-2:]
    if height % 2 or width % 2:
        x_pool = F.pad(x, (0, width % 2, 0, height % 2), value=-math.inf)
    else:
        x_pool = x
    return F.silu(
        r_bn(r_conv(x, sd, name + '.conv', stride=2, padding=1), sd, name + '.norm1') +
        r_bn(r_conv(F.max_pool2d(x_pool, 2), sd, name + '.residual'), sd, name + '.norm2'))


def _hatnet_downsample(x: torch.Tensor, sd: Weights, name: str) -> torch.Tensor:
    return r_gn(r_conv(x, sd, name + '.conv', stride=2, padding=1), sd, name + '.norm')


def _forward(sd: Weights, x: torch.Tensor, arch: dict, norm: Callable, irb: Callable,
             downsample: Callable, kernels) -> Tuple[List[torch.Tensor], Optional[torch.Tensor]]:
    x = F.silu(norm(r_conv(x, sd, 'patch_embed.0', stride=2, padding=1), sd, 'patch_embed.1'))
    x = r_conv(x, sd, 'patch_embed.3', stride=2, padding=1)
    feats = []
    for s in range(4):
        if s:
            x = downsample(x, sd, f'ds{s + 1}')
        for i in range(arch['depths'][s]):
            x = x + r_hmhsa(x, sd, f'blocks.{s}.{i}.attn', arch['num_heads'][s],
                            arch['grid_sizes'][s], arch['ds_ratios'][s], norm)
            x = x + irb(x, sd, f'blocks.{s}.{i}.conv', kernels[s])
        feats.append(x)
    logits = None
    if 'classifier.1.weight' in sd:
        logits = F.linear(x.mean((2, 3)), sd['classifier.1.weight'], sd['classifier.1.bias'])
    return feats, logits


def transcnn_forward(sd: Weights, x: torch.Tensor, arch: dict):
    """The official TransCNN forward: (4 stage maps, logits or None without a classifier)."""
    return _forward(sd, x, arch, r_bn, _transcnn_irb, _transcnn_downsample, TRANSCNN_KERNELS)


def hatnet_forward(sd: Weights, x: torch.Tensor, arch: dict):
    """The official HAT-Net forward: (4 stage maps, logits or None without a classifier)."""
    return _forward(sd, x, arch, r_gn, _hatnet_irb, _hatnet_downsample,
                    arch.get('kernel_sizes', HATNET_KERNELS))


# --- as a module, for timing -------------------------------------------------------------------
class OfficialHMHSA(nn.Module):
    """An ImageNet classifier of one H-MHSA release under its official key names (an official
    state dict loads as it is) computing that release's restated forward; random weights from
    :func:`~mmhvit.testing.state_dicts.random_state_dict` (norms near identity, non-trivial
    BatchNorm statistics). Inference only (BatchNorm uses its running statistics). A subclass names
    the release: ``layout`` (its ``*_shapes``) and ``computation`` (its ``*_forward``)."""
    layout: Callable[..., Shapes]
    computation: Callable

    def __init__(self, arch: dict, num_classes: int = 1000, seed: int = 0):
        super().__init__()
        self.arch = arch
        weights = random_state_dict(type(self).layout(arch, num_classes), seed, torch.float32)
        for key, value in weights.items():
            *path, leaf = key.split('.')
            module = self
            for part in path:
                if not hasattr(module, part):
                    module.add_module(part, nn.Module())
                module = getattr(module, part)
            if leaf in ('running_mean', 'running_var', 'num_batches_tracked'):
                module.register_buffer(leaf, value)
            else:
                module.register_parameter(leaf, nn.Parameter(value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = dict(self.named_parameters())
        weights.update(self.named_buffers())
        return type(self).computation(weights, x, self.arch)[1]


class OfficialTransCNN(OfficialHMHSA):
    """TransCNN (``TransCNN.py``): :func:`transcnn_shapes`, :func:`transcnn_forward`."""
    layout = staticmethod(transcnn_shapes)
    computation = staticmethod(transcnn_forward)


class OfficialHATNet(OfficialHMHSA):
    """HAT-Net (``HAT_Net.py``): :func:`hatnet_shapes` (with the unused ``attn.proj_norm``),
    :func:`hatnet_forward`."""
    layout = staticmethod(hatnet_shapes)
    computation = staticmethod(hatnet_forward)
