"""Matmul attention that keeps no attention weights for backward.

``softmax(q k^T * scale + bias, masked) @ v`` whose backward recomputes the weights from ``q``,
``k`` and the bias, a few query rows at a time, so that neither pass holds all (queries x keys)
weights of every head at once (it keeps the output, as they do). The backward is the softmax
attention gradient written out (one more ``q k^T`` than autograd's), not a second forward: with
``dP = dO V^T``, ``dV = P^T dO``, ``dS = P * (dP - rowsum(dO * O))``, ``dQ = dS K * scale``,
``dK = dS^T Q * scale``, and the bias's gradient ``dS`` summed to its shape.
"""
from typing import Iterator, Optional, Tuple

import torch

from .lean import AUTOCAST_DEVICES, replayed_autocast

# Elements of (batch x heads x query rows x keys) weights made at a time.
ROW_CHUNK_ELEMENTS = 1 << 23


def recomputed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         attn_mask: Optional[torch.Tensor], scale: Optional[float],
                         attn_bias: Optional[torch.Tensor]) -> torch.Tensor:
    """Attention of (B, heads, N, D) tensors; ``attn_mask`` bool, True for keys to attend,
    broadcastable to (B, heads, N, keys); ``attn_bias`` float, broadcastable to the same."""
    scale = q.shape[-1]**-0.5 if scale is None else scale
    return _RecomputedAttention.apply(q, k, v, attn_bias, attn_mask, scale)


def _row_chunks(q: torch.Tensor, keys: int) -> Iterator[Tuple[int, int]]:
    per_row = max(1, q.shape[0] * q.shape[1] * keys)
    step = max(1, ROW_CHUNK_ELEMENTS // per_row)
    for start in range(0, q.shape[-2], step):
        yield start, min(start + step, q.shape[-2])


def _rows(t: Optional[torch.Tensor], start: int, end: int) -> Optional[torch.Tensor]:
    """Rows ``start:end`` of a mask or bias with a query axis (dim -2), or all of one without."""
    if t is None or t.dim() < 2 or t.shape[-2] == 1:
        return t
    return t[..., start:end, :]


def _weights(q, k, bias, mask, scale):
    """The attention weights as the plain matmul kernel makes them (``_matmul_attention``):
    the same operations, so a recompute gives the forward's numbers exactly."""
    logits = (q * scale) @ k.transpose(-2, -1)
    if bias is not None:
        logits += bias
    if mask is not None:
        logits.masked_fill_(~mask, torch.finfo(logits.dtype).min)
    return logits.softmax(dim=-1)


class _RecomputedAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, bias, mask, scale):
        outs = [_weights(q[..., start:end, :], k, _rows(bias, start, end), _rows(mask, start, end),
                         scale) @ v
                for start, end in _row_chunks(q, k.shape[-2])]
        ctx.scale = scale
        ctx.autocast = [(device, torch.get_autocast_dtype(device))
                        for device in AUTOCAST_DEVICES if torch.is_autocast_enabled(device)]
        out = torch.cat(outs, dim=-2) if len(outs) > 1 else outs[0]
        ctx.save_for_backward(q, k, v, bias, mask, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, bias, mask, out = ctx.saved_tensors
        scale, needs = ctx.scale, ctx.needs_input_grad
        acc = torch.promote_types(grad_out.dtype, torch.float32)  # what the sums run in
        grad_out, q_acc, k_acc, v_acc = (t.to(acc) for t in (grad_out, q, k, v))
        grad_q = torch.empty_like(q_acc) if needs[0] else None
        grad_k, grad_v = torch.zeros_like(k_acc), torch.zeros_like(v_acc)
        grad_bias = None
        if needs[3]:  # every element written once when the bias has a query axis
            rows_axis = bias.dim() >= 2 and bias.shape[-2] != 1
            grad_bias = (torch.empty_like if rows_axis else torch.zeros_like)(bias, dtype=acc)
        # rowsum(P * dP) = rowsum(dO * O): what the softmax's backward subtracts, per query
        row_dots = (grad_out * out.to(acc)).sum(-1, keepdim=True)
        for start, end in _row_chunks(q, k.shape[-2]):
            rows = slice(start, end)
            with replayed_autocast(ctx.autocast):  # the weights as the forward made them
                weights = _weights(q[..., rows, :], k, _rows(bias, start, end),
                                   _rows(mask, start, end), scale).to(acc)
            grad_v += weights.transpose(-2, -1) @ grad_out[..., rows, :]
            grad_weights = grad_out[..., rows, :] @ v_acc.transpose(-2, -1)
            grad_logits = grad_weights.sub_(row_dots[..., rows, :]).mul_(weights)  # softmax's
            del weights
            grad_k += (grad_logits.transpose(-2, -1) @ q_acc[..., rows, :]).mul_(scale)
            if grad_q is not None:
                grad_q[..., rows, :] = (grad_logits @ k_acc).mul_(scale)
            if grad_bias is not None:
                _add_bias_grad(grad_bias, grad_logits, start, end)
        return (None if grad_q is None else grad_q.to(q.dtype),
                grad_k.to(k.dtype) if needs[1] else None,
                grad_v.to(v.dtype) if needs[2] else None,
                None if grad_bias is None else grad_bias.to(bias.dtype), None, None)


def _add_bias_grad(grad_bias: torch.Tensor, grad_logits: torch.Tensor, start: int,
                   end: int) -> None:
    """The logits' gradient of query rows ``start:end``, summed to the bias's shape: written
    into its rows (a bias with a query axis) or added (one without)."""
    if grad_bias.dim() >= 2 and grad_bias.shape[-2] != 1:
        target = grad_bias[..., start:end, :]
        target.copy_(grad_logits.sum_to_size(target.shape))
    else:
        grad_bias += grad_logits.sum_to_size(grad_bias.shape)
