"""Multi-head attention on token groups (windows, blocks, sentences, whole images)."""
import contextlib
import functools
import warnings
from typing import Iterator, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .export import is_exporting
from .pos_embed import AttnBiasRows
from .recomputed_attention import attention_weights, recomputed_attention

ATTENTION_KERNELS = ('auto', 'sdpa', 'matmul')
# Up to this many keys, plain matmul + softmax beats the CPU SDPA kernels (TNT's 16-word sentences,
# TransCNN's 8x8 windows; tools/analysis_tools/benchmark.py times both). GPUs always take SDPA's
# fused kernels.
CPU_SHORT_SEQUENCE = 64
# Queries per chunk of exported attention; None: whole (see export_attention_chunk).
_export_chunk: Optional[int] = None


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
                        attn_bias: Optional[torch.Tensor] = None,
                        recompute: bool = False,
                        recompute_long: bool = False) -> torch.Tensor:
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
            written out) or ``'auto'``: matmul where it is faster (:func:`auto_kernel`).
            While exporting (:func:`is_exporting`) every kernel becomes plain matmul attention
            with an additive finite mask, the form ONNX runtimes and MMDeploy rewrites handle;
            under :func:`export_attention_chunk`, an ONNX ``Loop`` over query chunks where the
            queries outnumber the chunk.
        attn_bias (Tensor | AttnBiasRows, optional): A float bias added to the logits,
            broadcastable to (B, heads, Nq, Nk): a learned position bias (PyramidTNT's
            ``relative_pos``). It takes the logits' dtype (the projections' under autocast).
            :class:`AttnBiasRows`: made a few query rows at a time where the weights are
            recomputed (``recompute``), whole elsewhere.
        recompute (bool): Where the matmul kernel runs with gradients on at most
            ``CPU_SHORT_SEQUENCE`` keys (windows, TNT's words), keep only its inputs for backward
            and recompute the attention weights there (what SDPA's fused kernels do), instead of
            keeping the (queries x keys) weights of every head: cheap for short sequences.
        recompute_long (bool): With ``recompute``, for any number of keys (a second QK^T and
            softmax in backward: PyramidTNT's biased attention over pooled keys).

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
    return merge_heads(_heads_attention(q, k, v, attn_mask, scale, dropout_p, kernel,
                                        attn_bias, recompute, recompute_long))


def _heads_attention(q, k, v, attn_mask, scale, dropout_p, kernel, attn_bias, recompute,
                     recompute_long):
    """:func:`multihead_attention` of (B, heads, N, D) tensors: the path and kernel chosen."""
    if isinstance(attn_bias, torch.Tensor):
        attn_bias = attn_bias.to(q.dtype)
    if is_exporting():
        if isinstance(attn_bias, AttnBiasRows):
            attn_bias = attn_bias.whole().to(q.dtype)
        return _export_attention(q, k, v, attn_mask, scale, attn_bias)
    # The tensor a bias is made from: itself, or the table of rows made chunk by chunk
    bias_source = attn_bias.table if isinstance(attn_bias, AttnBiasRows) else attn_bias
    if kernel == 'auto':
        kernel = auto_kernel(q, k, bias_source)
    recompute = recompute and (recompute_long or k.shape[-2] <= CPU_SHORT_SEQUENCE)
    recompute = kernel == 'matmul' and recompute and torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, bias_source))
    if recompute and dropout_p == 0:
        return recomputed_attention(q, k, v, attn_mask, scale, attn_bias)
    if isinstance(attn_bias, AttnBiasRows):  # every other kernel takes the whole bias
        attn_bias = attn_bias.whole().to(q.dtype)
    return _run_kernel(kernel, q, k, v, attn_mask, scale, dropout_p, attn_bias, recompute)


def _run_kernel(kernel, q, k, v, attn_mask, scale, dropout_p, attn_bias, recompute):
    """Attention of (B, heads, N, D) tensors by ``kernel`` (see :func:`multihead_attention`);
    ``recompute``: the matmul kernel's, with dropout, under checkpoint."""
    if recompute:
        # The dropout mask is drawn again from the same random state (checkpoint restores it).
        return checkpoint(_matmul_attention, q, k, v, attn_mask, scale, dropout_p, attn_bias,
                          use_reentrant=False)
    if kernel == 'matmul':
        return _matmul_attention(q, k, v, attn_mask, scale, dropout_p, attn_bias)
    if kernel == 'sdpa':
        if attn_bias is not None:
            # One float mask: the bias, and the dtype's lowest value at padded keys.
            attn_mask = attn_bias if attn_mask is None else torch.where(
                attn_mask, attn_bias, torch.finfo(attn_bias.dtype).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                              scale=scale)
    raise ValueError(f'attention kernel must be one of {ATTENTION_KERNELS}, got {kernel!r}')


def auto_kernel(q: torch.Tensor, k: torch.Tensor, attn_bias: Optional[torch.Tensor]) -> str:
    """The kernel ``'auto'`` stands for: ``'matmul'`` on the CPU for short key sequences, and for
    a bias that takes gradients (a learned position bias in training), for which PyTorch's CPU
    SDPA leaves its fused kernel for its math fallback, the same products plus a pass that checks
    every row for all -inf logits (``_safe_softmax``: ``isneginf`` + ``all``); else ``'sdpa'``."""
    if q.device.type != 'cpu':
        return 'sdpa'
    learned_bias = (attn_bias is not None and attn_bias.requires_grad
                    and torch.is_grad_enabled())
    return 'matmul' if k.shape[-2] <= CPU_SHORT_SEQUENCE or learned_bias else 'sdpa'


# Logit offset of masked keys in exported graphs: finite (no -inf, which some runtimes and fp16
# engines turn into NaN), and far enough below any real logit that exp() underflows to exactly 0.
EXPORT_MASK_VALUE = -1e4


def _export_attention(q, k, v, attn_mask, scale, attn_bias=None):
    """Attention for traced / exported graphs: matmul, softmax, an additive finite mask, no
    dropout (export is inference); in query chunks under :func:`export_attention_chunk`."""
    scale = q.shape[-1]**-0.5 if scale is None else scale  # traced: a tensor of the head size
    if not isinstance(scale, torch.Tensor):
        scale = q.new_full((), scale)  # a given scale (TorchScript takes one type)
    key_bias = None if attn_mask is None else (~attn_mask).to(q.dtype) * EXPORT_MASK_VALUE
    chunk = _export_chunk
    if chunk is None:
        return _additive_attention(q, k, v, scale, attn_bias, key_bias, attn_bias is not None,
                                   key_bias is not None)
    if attn_bias is not None:
        attn_bias = attn_bias[(None, ) * (4 - attn_bias.dim())]  # 4-D: rows on axis 2
    # TorchScript takes no None for a Tensor: an unused placeholder, dropped from the graph (the
    # has_* flags are constants of the trace, and the exporter folds the branches on them).
    unused = q.new_zeros(())
    return _scripted_query_chunks()(q, k, v, scale,
                                    unused if attn_bias is None else attn_bias,
                                    unused if key_bias is None else key_bias,
                                    attn_bias is not None, key_bias is not None, chunk)


def _additive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: torch.Tensor,
                        attn_bias: Optional[torch.Tensor], key_bias: Optional[torch.Tensor],
                        has_bias: bool, has_key_bias: bool) -> torch.Tensor:
    """``softmax((q * scale) @ k^T + attn_bias + key_bias) @ v``, the terms whose ``has_*`` flag
    is set (TorchScript-compatible: the chunked form below is scripted)."""
    logits = (q * scale) @ k.transpose(-2, -1)
    # (``is not None`` narrows the Optional types for TorchScript; the flags decide.)
    if has_bias and attn_bias is not None:
        logits = logits + attn_bias
    if has_key_bias and key_bias is not None:
        logits = logits + key_bias
    return logits.softmax(dim=-1) @ v


def _query_chunks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: torch.Tensor,
                  attn_bias: torch.Tensor, key_bias: torch.Tensor, has_bias: bool,
                  has_key_bias: bool, chunk: int) -> torch.Tensor:
    """:func:`_additive_attention` of at most ``chunk`` queries at a time (scripted: the branch
    and the loop, on the runtime query count, become an ONNX ``If`` and ``Loop``).

    ``attn_bias`` is 4-D, (.., queries, keys) or (.., 1, keys); its rows are taken with the
    queries'. ``key_bias``, (.., 1, keys), is added to every chunk.
    """
    queries = q.size(2)
    if queries <= chunk:
        return _additive_attention(q, k, v, scale, attn_bias, key_bias, has_bias, has_key_bias)
    outs: List[torch.Tensor] = []
    for start in range(0, queries, chunk):
        rows = attn_bias
        if has_bias and attn_bias.size(2) > 1:
            rows = attn_bias[:, :, start:start + chunk]
        outs.append(_additive_attention(q[:, :, start:start + chunk], k, v, scale, rows,
                                        key_bias, has_bias, has_key_bias))
    return torch.cat(outs, dim=2)


@functools.lru_cache(maxsize=None)
def _scripted_query_chunks():
    """:func:`_query_chunks` compiled by TorchScript, once (only chunked exports need it;
    :func:`export_attention_chunk` compiles it before the export traces). A scripted function
    that ``torch.onnx.export`` meets while tracing keeps its control flow: the query loop is
    exported as an ONNX ``Loop`` whose trip count the graph computes from the runtime size, not
    unrolled at the traced size."""
    with warnings.catch_warnings():
        # torch 2.14 deprecates TorchScript as a whole; the TorchScript ONNX exporter, which this
        # package uses (docs/deployment.md), is the reason it is still needed.
        warnings.simplefilter('ignore', FutureWarning)
        return torch.jit.script(_query_chunks)


def _matmul_attention(q, k, v, attn_mask, scale, dropout_p, attn_bias=None):
    """SDPA's maths, written out: the faster path for short sequences on the CPU."""
    scale = q.shape[-1]**-0.5 if scale is None else scale
    weights = attention_weights(q, k, attn_bias, attn_mask, scale)
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


@contextlib.contextmanager
def export_attention_chunk(queries: Optional[int]) -> Iterator[None]:
    """Within this context, attention exported to ONNX runs at most ``queries`` queries at a time.

    Every :func:`multihead_attention` call that ``torch.onnx.export`` (TorchScript exporter)
    traces inside the context becomes an ONNX ``If`` on the runtime query count: up to
    ``queries`` queries, the whole attention, as without the context; more, an ONNX ``Loop`` over
    chunks of ``queries`` queries (the last one ragged) whose results are concatenated, so that
    at most ``queries`` x keys logits per head and batch item exist at a time instead of all
    queries x keys. An attention bias is taken row by row with its queries, a key mask whole.
    The chunk count is computed in the graph, so one dynamic-shape graph serves every input size,
    with the whole attention's numbers up to float rounding. None (the default): whole attention
    everywhere. Eager, ``torch.compile`` and ``torch.jit.trace`` runs are unaffected.

    Example::

        with export_attention_chunk(256):
            torch.onnx.export(model, args, path, dynamo=False, ...)
    """
    if queries is not None and (isinstance(queries, bool) or not isinstance(queries, int)
                                or queries < 1):
        raise ValueError(f'attention chunk must be a positive int or None, got {queries!r}')
    if queries is not None:
        _scripted_query_chunks()  # compiled before the export traces
    global _export_chunk
    previous, _export_chunk = _export_chunk, queries
    try:
        yield
    finally:
        _export_chunk = previous
