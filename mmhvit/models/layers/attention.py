"""Multi-head attention on token groups (windows, blocks, sentences, whole images)."""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .export import is_exporting

ATTENTION_KERNELS = ('auto', 'sdpa', 'matmul')
# Up to this many keys, plain matmul + softmax beats the CPU SDPA kernels (TNT's 16-word sentences,
# TransCNN's 8x8 windows: 1.2-1.6x faster on x86 with torch 2.14; measured by
# tools/analysis_tools/benchmark.py). GPUs always take SDPA's fused kernels.
CPU_SHORT_SEQUENCE = 64


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, N, C) -> (B, heads, N, C // heads)."""
    batch, tokens, channels = x.shape
    return x.view(batch, tokens, num_heads, channels // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, heads, N, D) -> (B, N, heads * D)."""
    batch, heads, tokens, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, tokens, heads * head_dim)


def multihead_attention(q: torch.Tensor,
                        k: torch.Tensor,
                        v: torch.Tensor,
                        num_heads: int,
                        key_mask: Optional[torch.Tensor] = None,
                        scale: Optional[float] = None,
                        dropout_p: float = 0.,
                        kernel: str = 'auto',
                        attn_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Scaled dot-product attention of token groups, heads split from the channels.

    Args:
        q (Tensor): Queries (B, Nq, C); channels are head-major (head i owns a contiguous slice).
        k (Tensor): Keys (B, Nk, C).
        v (Tensor): Values (B, Nk, Cv).
        num_heads (int): Number of heads; C and Cv must be divisible by it.
        key_mask (Tensor, optional): Bool (G, Nk), True for real keys, where the batch is laid out
            as (B // G, G) (images outer, groups inner: what ``window_partition`` produces).
            Padded keys get zero weight. None: every key is real.
        scale (float, optional): Logit scale; default head_dim ** -0.5.
        dropout_p (float): Attention dropout, applied only in training by the caller's choice.
        kernel (str): ``'sdpa'`` (``scaled_dot_product_attention``), ``'matmul'`` (its maths
            written out) or ``'auto'``: matmul for short CPU sequences, where it is faster.
            While exporting (:func:`is_exporting`) every kernel becomes plain matmul attention
            with an additive finite mask, the form ONNX runtimes and MMDeploy rewrites handle.
        attn_bias (Tensor, optional): A float bias added to the logits, broadcastable to
            (B, heads, Nq, Nk): a learned position bias (PyramidTNT's ``relative_pos``). It
            takes the logits' dtype (the projections' under autocast).

    Returns:
        Tensor: (B, Nq, Cv).
    """
    attn_mask = None
    if key_mask is not None:
        # A group made only of padding has no valid key; letting it attend to its padding keeps the
        # softmax free of NaN, and its queries are padding too, so the result is discarded.
        key_mask = key_mask | ~key_mask.any(dim=-1, keepdim=True)
        groups = key_mask.shape[0]
        attn_mask = key_mask[:, None, None, :].repeat(q.shape[0] // groups, 1, 1, 1)
    q, k, v = (split_heads(t, num_heads) for t in (q, k, v))
    if attn_bias is not None:
        attn_bias = attn_bias.to(q.dtype)
    if is_exporting():
        return merge_heads(_export_attention(q, k, v, attn_mask, scale, attn_bias))
    if kernel == 'auto':
        short = q.device.type == 'cpu' and k.shape[-2] <= CPU_SHORT_SEQUENCE
        kernel = 'matmul' if short else 'sdpa'
    if kernel == 'matmul':
        out = _matmul_attention(q, k, v, attn_mask, scale, dropout_p, attn_bias)
    elif kernel == 'sdpa':
        if attn_bias is not None:
            # One float mask: the bias, and the dtype's lowest value at padded keys.
            attn_mask = attn_bias if attn_mask is None else torch.where(
                attn_mask, attn_bias, torch.finfo(attn_bias.dtype).min)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                             scale=scale)
    else:
        raise ValueError(f'attention kernel must be one of {ATTENTION_KERNELS}, got {kernel!r}')
    return merge_heads(out)


# Logit offset of masked keys in exported graphs: finite (no -inf, which some runtimes and fp16
# engines turn into NaN), and far enough below any real logit that exp() underflows to exactly 0.
EXPORT_MASK_VALUE = -1e4


def _export_attention(q, k, v, attn_mask, scale, attn_bias=None):
    """Attention for traced / exported graphs: matmul, softmax, an additive finite mask, no
    dropout (export is inference)."""
    scale = q.shape[-1]**-0.5 if scale is None else scale
    logits = (q * scale) @ k.transpose(-2, -1)
    if attn_bias is not None:
        logits = logits + attn_bias
    if attn_mask is not None:
        logits = logits + (~attn_mask).to(logits.dtype) * EXPORT_MASK_VALUE
    return logits.softmax(dim=-1) @ v


def _matmul_attention(q, k, v, attn_mask, scale, dropout_p, attn_bias=None):
    """SDPA's maths, written out: the faster path for short sequences on the CPU."""
    scale = q.shape[-1]**-0.5 if scale is None else scale
    logits = (q * scale) @ k.transpose(-2, -1)
    if attn_bias is not None:
        logits = logits + attn_bias
    if attn_mask is not None:
        # The dtype's most negative finite value, not -inf: it cannot overflow in half precision,
        # and even a row with no valid key stays finite (uniform weights) instead of NaN.
        logits = logits.masked_fill(~attn_mask, torch.finfo(logits.dtype).min)
    weights = logits.softmax(dim=-1)
    if dropout_p > 0:
        weights = F.dropout(weights, dropout_p)
    return weights @ v


def set_attention_kernel(model: nn.Module, kernel: str) -> dict:
    """Set ``attn_kernel`` of every attention module of ``model``; returns the previous values.

    Attention modules of this package carry an ``attn_kernel`` attribute that they pass to
    :func:`multihead_attention`; a FLOP counter, say, routes a model's attention through SDPA
    (one op it can recognise) this way, for that model only.
    """
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f'attention kernel must be one of {ATTENTION_KERNELS}, got {kernel!r}')
    previous = {}
    for module in model.modules():
        if hasattr(module, 'attn_kernel'):
            previous[module] = module.attn_kernel
            module.attn_kernel = kernel
    return previous
