"""Depthwise convolution whose backward runs as forward convolutions, where that is faster.

On the CPU, the backward of a depthwise convolution with a kernel over 3 x 3 (oneDNN's, through
autograd) is many times slower than its forward, most of all on channels-last maps. For a
stride-1 depthwise convolution both gradients are convolutions too: the input's gradient is the
output's gradient convolved with the flipped kernel, and the weight's gradient, for a kernel
larger than 3 x 3, is assembled from 3 x 3 tiles, each a weight gradient of the 3 x 3 kernel that
oneDNN computes fast. The numbers are the same up to float rounding (sums in another order).
GPUs and autocast keep PyTorch's own path.
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

TILE = 3  # the kernel side oneDNN's depthwise weight gradient is fast for


def depthwise_conv2d(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                     padding: Sequence[int]) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, padding=padding, groups=channels)``, stride and dilation 1,
    for a (channels, 1, kh, kw) ``weight``; its backward by :class:`_DepthwiseConv2d` where that
    applies (CPU, no autocast, a gradient wanted, a kernel over 3 x 3, ``padding`` < the
    kernel); 3 x 3 kernels keep autograd's, as fast there."""
    padding = tuple(padding)
    fast = (x.device.type == 'cpu' and not torch.is_autocast_enabled('cpu')
            and max(weight.shape[2:]) > TILE
            and torch.is_grad_enabled()
            and any(t is not None and t.requires_grad for t in (x, weight, bias))
            and all(0 <= p < k for p, k in zip(padding, weight.shape[2:])))
    if not fast:
        return F.conv2d(x, weight, bias, padding=padding, groups=weight.shape[0])
    return _DepthwiseConv2d.apply(x, weight, bias, padding)


def memory_format(x: torch.Tensor) -> torch.memory_format:
    """The layout of a map: channels-last where it is that and not also contiguous."""
    channels_last = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) \
        and not x.is_contiguous()
    return torch.channels_last if channels_last else torch.contiguous_format


def is_depthwise(conv: torch.nn.Conv2d) -> bool:
    """Whether ``conv`` is a stride-1, undilated depthwise conv with zero padding."""
    return (conv.groups == conv.in_channels == conv.out_channels
            and conv.stride == (1, 1) and conv.dilation == (1, 1)
            and conv.padding_mode == 'zeros' and not isinstance(conv.padding, str))


class _DepthwiseConv2d(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, weight, bias, padding):
        ctx.save_for_backward(x, weight)
        ctx.padding = padding
        ctx.has_bias = bias is not None
        return F.conv2d(x, weight, bias, padding=padding, groups=weight.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        padding, channels = ctx.padding, weight.shape[0]
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            # The transposed convolution of a stride-1 one: the flipped kernel, the padding
            # mirrored (k - 1 - p), which gives back the input's size.
            flipped = [k - 1 - p for p, k in zip(padding, weight.shape[2:])]
            grad_x = F.conv2d(grad_out, weight.flip(-2, -1), padding=flipped, groups=channels)
        if ctx.needs_input_grad[1]:
            grad_weight = depthwise_weight_grad(x, grad_out, weight.shape, padding)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_out.sum((0, 2, 3))
        return grad_x, grad_weight, grad_bias, None


def depthwise_weight_grad(x: torch.Tensor, grad_out: torch.Tensor, shape: torch.Size,
                          padding: Tuple[int, int]) -> torch.Tensor:
    """The gradient of a stride-1 depthwise conv's (channels, 1, kh, kw) weight: entry (i, j)
    is the sum of ``grad_out`` times the zero-padded input shifted by (i, j), made from 3 x 3
    tiles of shifts (overlapping where a side is not a multiple of 3)."""
    channels, _, kh, kw = shape
    (tiles_h, side_h), (tiles_w, side_w) = tile_starts(kh), tile_starts(kw)
    height, width = grad_out.shape[2:]
    # One buffer for every tile's shifted input: a fresh map per tile costs more than the tile.
    shifted = torch.empty((x.shape[0], channels, height + side_h - 1, width + side_w - 1),
                          dtype=x.dtype, device=x.device, memory_format=memory_format(x))
    grad = x.new_empty(shape)
    for top in tiles_h:
        for left in tiles_w:
            write_shifted(shifted, x, top - padding[0], left - padding[1])
            grad[:, :, top:top + side_h, left:left + side_w] = torch.nn.grad.conv2d_weight(
                shifted, (channels, 1, side_h, side_w), grad_out, groups=channels)
    return grad


def write_shifted(out: torch.Tensor, x: torch.Tensor, dy: int, dx: int) -> None:
    """``out[..., i, j] = x[..., i + dy, j + dx]``, 0 outside ``x``."""
    rows, cols = out.shape[2:]
    top, bottom = max(0, -dy), min(rows, x.shape[2] - dy)
    left, right = max(0, -dx), min(cols, x.shape[3] - dx)
    for region in (out[:, :, :top], out[:, :, bottom:], out[:, :, :, :left],
                   out[:, :, :, right:]):
        region.zero_()
    out[:, :, top:bottom, left:right] = x[:, :, top + dy:bottom + dy, left + dx:right + dx]


def tile_starts(kernel: int) -> Tuple[List[int], int]:
    """The first shifts of the tiles covering ``kernel`` shifts along one side, and the tiles'
    side."""
    side = min(TILE, kernel)
    return sorted({*range(0, kernel - side, side), kernel - side}), side
