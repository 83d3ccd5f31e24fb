"""Matmul attention that keeps no attention weights for backward.

``softmax(q k^T * scale + bias, masked) @ v`` whose backward recomputes the weights from ``q``,
``k`` and the bias, a chunk at a time (a few batch entries, e.g. windows, or a few query rows),
so that neither pass holds all (queries x keys) weights of every head at once (it keeps the
output, as they do). The backward is the softmax attention gradient written out (one more
``q k^T`` than autograd's), not a second forward: with ``dP = dO V^T``, ``dV = P^T dO``,
``dS = P * (dP - rowsum(dO * O))``, ``dQ = dS K * scale``, ``dK = dS^T Q * scale``, and the
bias's gradient ``dS`` summed to its shape.
"""
from typing import Iterator, Optional, Tuple, Union

import torch

from .lean import autocast_states, replayed_autocast
from .pos_embed import AttnBiasRows

# Elements of (batch x heads x query rows x keys) weights made at a time. On the CPU few enough
# (4 MiB in float32) that a chunk's temporaries stay in the last-level cache, in memory that
# glibc's malloc reuses (under its mmap threshold) rather than pages faulted in anew for every
# chunk; on other devices more, for fewer kernel launches.
CHUNK_ELEMENTS = 1 << 20
DEVICE_CHUNK_ELEMENTS = 1 << 23


def recomputed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         attn_mask: Optional[torch.Tensor], scale: Optional[float],
                         attn_bias: Union[torch.Tensor, AttnBiasRows, None]) -> torch.Tensor:
    """Attention of (B, heads, N, D) tensors; ``attn_mask`` bool, True for keys to attend,
    broadcastable to (B, heads, N, keys); ``attn_bias`` float, broadcastable to the same, or an
    :class:`AttnBiasRows` whose rows are made with each chunk's queries (in both passes: the
    whole bias never exists, and its gradient goes to the small table it is made from)."""
    scale = q.shape[-1]**-0.5 if scale is None else scale
    if isinstance(attn_bias, AttnBiasRows):
        return _RecomputedAttention.apply(q, k, v, attn_bias.table, attn_mask, scale, attn_bias)
    return _RecomputedAttention.apply(q, k, v, attn_bias, attn_mask, scale, None)


def _chunks(q: torch.Tensor, keys: int, bias_rows: Optional[AttnBiasRows]
            ) -> Iterator[Tuple[slice, slice]]:
    """(batch, query) ranges of about ``CHUNK_ELEMENTS`` weights (on the CPU): whole batch
    entries (windows, sentences) where one entry's weights fit, so that each product stays a
    large one; else query rows of every entry (whole grid rows for ``bias_rows``)."""
    batch, heads, queries = q.shape[:3]
    limit = CHUNK_ELEMENTS if q.device.type == 'cpu' else DEVICE_CHUNK_ELEMENTS
    per_entry = heads * queries * keys
    if bias_rows is None and per_entry <= limit:
        step = limit // per_entry
        for start in range(0, batch, step):
            yield slice(start, min(start + step, batch)), slice(None)
        return
    multiple = 1 if bias_rows is None else bias_rows.width
    step = max(1, limit // (batch * heads * keys * multiple)) * multiple
    for start in range(0, queries, step):
        yield slice(None), slice(start, min(start + step, queries))


def _has_query_axis(t: torch.Tensor) -> bool:
    """Whether a mask or bias has one row per query (dim -2), rather than one for all."""
    return t.dim() >= 2 and t.shape[-2] != 1


def _rows(t: Optional[torch.Tensor], entries: slice, rows: slice) -> Optional[torch.Tensor]:
    """The chunk ``entries, rows`` of a mask or bias: its batch entries unless it has one for
    all, its query rows unless it has one for all."""
    if t is None:
        return t
    if t.dim() == 4 and t.shape[0] != 1:
        t = t[entries]
    return t[..., rows, :] if _has_query_axis(t) else t


def _bias(bias, bias_rows, entries, rows, dtype):
    """The bias of a chunk: of the tensor, or made by ``bias_rows`` from its table (``bias``
    then) for whole grid rows of every entry."""
    if bias_rows is None:
        return _rows(bias, entries, rows)
    return bias_rows.query_rows(rows.start, rows.stop).to(dtype)


def attention_weights(q: torch.Tensor, k: torch.Tensor, bias: Optional[torch.Tensor],
                      mask: Optional[torch.Tensor], scale: float) -> torch.Tensor:
    """``softmax(q k^T * scale + bias, masked)``: the matmul kernel's weights, in its forward
    and in this recompute alike, so that a recompute gives the forward's numbers exactly."""
    logits = (q * scale) @ k.transpose(-2, -1)
    if bias is not None:
        logits += bias
    if mask is not None:
        # The dtype's most negative finite value, not -inf: it cannot overflow in half precision,
        # and even a row with no valid key stays finite (uniform weights) instead of NaN.
        logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    return logits.softmax(dim=-1)


class _RecomputedAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, bias, mask, scale, bias_rows):
        outs = [(entries, rows, attention_weights(
            q[entries, :, rows], k[entries], _bias(bias, bias_rows, entries, rows, q.dtype),
            _rows(mask, entries, rows), scale) @ v[entries])
            for entries, rows in _chunks(q, k.shape[-2], bias_rows)]
        out = outs[0][2]
        if len(outs) > 1:
            out = out.new_empty(*q.shape[:-1], v.shape[-1])
            for entries, rows, chunk in outs:
                out[entries, :, rows] = chunk
        ctx.scale, ctx.bias_rows = scale, bias_rows
        ctx.autocast = autocast_states()
        ctx.save_for_backward(q, k, v, bias, mask, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, bias, mask, out = ctx.saved_tensors
        scale, needs, bias_rows = ctx.scale, ctx.needs_input_grad, ctx.bias_rows
        acc = torch.promote_types(grad_out.dtype, torch.float32)  # what the sums run in
        grad_out, q_acc, k_acc, v_acc = (t.to(acc) for t in (grad_out, q, k, v))
        grad_q = torch.empty_like(q_acc) if needs[0] else None
        grad_k, grad_v = torch.zeros_like(k_acc), torch.zeros_like(v_acc)
        grad_bias = _BiasGrad(bias, bias_rows, acc) if needs[3] else None
        # rowsum(P * dP) = rowsum(dO * O): what the softmax's backward subtracts, per query
        row_dots = (grad_out * out.to(acc)).sum(-1, keepdim=True)
        for entries, rows in _chunks(q, k.shape[-2], bias_rows):
            chunk_out = grad_out[entries, :, rows]
            with replayed_autocast(ctx.autocast):  # the weights as the forward made them
                weights = attention_weights(q[entries, :, rows], k[entries],
                                            _bias(bias, bias_rows, entries, rows, q.dtype),
                                            _rows(mask, entries, rows), scale).to(acc)
            grad_v[entries] += weights.transpose(-2, -1) @ chunk_out
            grad_weights = chunk_out @ v_acc[entries].transpose(-2, -1)
            grad_logits = grad_weights.sub_(row_dots[entries, :, rows]).mul_(weights)  # softmax's
            del weights
            grad_k[entries] += (grad_logits.transpose(-2, -1) @ q_acc[entries, :, rows]
                                ).mul_(scale)
            if grad_q is not None:
                grad_q[entries, :, rows] = (grad_logits @ k_acc[entries]).mul_(scale)
            if grad_bias is not None:
                grad_bias.add(grad_logits, entries, rows)
        return (None if grad_q is None else grad_q.to(q.dtype),
                grad_k.to(k.dtype) if needs[1] else None,
                grad_v.to(v.dtype) if needs[2] else None,
                None if grad_bias is None else grad_bias.result(), None, None, None)


class _BiasGrad:
    """The bias's gradient, built chunk by chunk: into a tensor of the bias's shape, or, for
    :class:`AttnBiasRows`, through each chunk's rows back to the table they were made from."""

    def __init__(self, bias: torch.Tensor, bias_rows: Optional[AttnBiasRows], acc):
        self.bias, self.bias_rows = bias, bias_rows
        self.grad = torch.zeros_like(bias, dtype=acc)

    def add(self, grad_logits: torch.Tensor, entries: slice, rows: slice):
        if self.bias_rows is not None:
            grad_rows = grad_logits.sum(0, keepdim=True)  # the rows are every entry's
            self.grad += self.bias_rows.table_grad(rows.start, rows.stop, grad_rows)
        else:  # the chunk's part of the gradient: a view of it
            target = _rows(self.grad, entries, rows)
            target += grad_logits.sum_to_size(target.shape)

    def result(self) -> torch.Tensor:
        return self.grad.to(self.bias.dtype)
