"""Multi-head attention on token groups (windows, blocks, whole images) through SDPA."""
import contextlib
from typing import Optional

import torch
import torch.nn.functional as F

# Up to this many keys, plain matmul + softmax beats the CPU SDPA kernels (TNT's 16-word sentences,
# TransCNN's 8x8 windows: 1.2-1.6x faster on x86 with torch 2.14; measured by
# tools/analysis_tools/benchmark.py). GPUs always take SDPA's fused kernels.
CPU_SHORT_SEQUENCE = 64
_short_sequence_path = True


@contextlib.contextmanager
def sdpa_only():
    """Route every attention through ``scaled_dot_product_attention`` (one op a FLOP counter can
    recognise and count or leave out as a whole)."""
    global _short_sequence_path
    previous, _short_sequence_path = _short_sequence_path, False
    try:
        yield
    finally:
        _short_sequence_path = previous


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
                        dropout_p: float = 0.) -> torch.Tensor:
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

    Returns:
        Tensor: (B, Nq, Cv).
    """
    attn_mask = None
    if key_mask is not None:
        # A group made only of padding has no valid key; letting it attend to its padding keeps SDPA
        # free of NaN, and its queries are padding too, so the result is discarded.
        key_mask = key_mask | ~key_mask.any(dim=-1, keepdim=True)
        groups = key_mask.shape[0]
        attn_mask = key_mask[:, None, None, :].repeat(q.shape[0] // groups, 1, 1, 1)
    q, k, v = (split_heads(t, num_heads) for t in (q, k, v))
    if _short_sequence_path and q.device.type == 'cpu' and k.shape[-2] <= CPU_SHORT_SEQUENCE:
        out = _matmul_attention(q, k, v, attn_mask, scale, dropout_p)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                             scale=scale)
    return merge_heads(out)


def _matmul_attention(q, k, v, attn_mask, scale, dropout_p):
    """SDPA's math, written out: the faster path for short sequences on the CPU."""
    scale = q.shape[-1]**-0.5 if scale is None else scale
    logits = (q * scale) @ k.transpose(-2, -1)
    if attn_mask is not None:
        logits = logits.masked_fill(~attn_mask, float('-inf'))
    weights = logits.softmax(dim=-1)
    if dropout_p > 0:
        weights = F.dropout(weights, dropout_p)
    return weights @ v
