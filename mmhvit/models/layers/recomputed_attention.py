"""Matmul attention that keeps no attention weights for backward.

``softmax(q k^T * scale + bias, masked) @ v`` whose backward recomputes the weights from ``q``,
``k``, the bias and each query's log-sum-exp of the logits (what SDPA's fused kernels keep), a
few query rows at a time, so that neither pass holds all (queries x keys) weights of every head
at once. The backward is the softmax attention gradient written out (one more ``q k^T`` than
autograd's), not a second forward: with ``dP = dO V^T``, ``dV = P^T dO``,
``dS = P * (dP - rowsum(P * dP))``, ``dQ = dS K * scale``, ``dK = dS^T Q * scale``, and the
bias's gradient ``dS`` summed to its shape.
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


def _logits(q, k, bias, mask, scale):
    """The logits as the plain matmul kernel makes them (``_matmul_attention``)."""
    logits = (q * scale) @ k.transpose(-2, -1)
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    return logits


class _RecomputedAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, bias, mask, scale):
        outs, lses = [], []
        for start, end in _row_chunks(q, k.shape[-2]):
            logits = _logits(q[..., start:end, :], k, _rows(bias, start, end),
                             _rows(mask, start, end), scale)
            outs.append(logits.softmax(dim=-1) @ v)
            lses.append(logits.to(torch.promote_types(logits.dtype, torch.float32)).logsumexp(
                dim=-1, keepdim=True))
        out = torch.cat(outs, dim=-2) if len(outs) > 1 else outs[0]
        lse = torch.cat(lses, dim=-2) if len(lses) > 1 else lses[0]
        ctx.scale = scale
        ctx.autocast = [(device, torch.get_autocast_dtype(device))
                        for device in AUTOCAST_DEVICES if torch.is_autocast_enabled(device)]
        ctx.save_for_backward(q, k, v, bias, mask, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, bias, mask, lse = ctx.saved_tensors
        scale, needs = ctx.scale, ctx.needs_input_grad
        acc = torch.promote_types(grad_out.dtype, torch.float32)  # what the sums run in
        grad_out, q32, k32, v32 = (t.to(acc) for t in (grad_out, q, k, v))
        grad_q = torch.empty_like(q32) if needs[0] else None
        grad_k, grad_v = torch.zeros_like(k32), torch.zeros_like(v32)
        grad_bias = torch.zeros_like(bias, dtype=acc) if needs[3] else None
        for start, end in _row_chunks(q, k.shape[-2]):
            rows = slice(start, end)
            with replayed_autocast(ctx.autocast):  # the logits as the forward made them
                logits = _logits(q[..., rows, :], k, _rows(bias, start, end),
                                 _rows(mask, start, end), scale)
            weights = logits.to(acc).sub_(lse[..., rows, :]).exp_()
            del logits
            grad_v += weights.transpose(-2, -1) @ grad_out[..., rows, :]
            grad_weights = grad_out[..., rows, :] @ v32.transpose(-2, -1)
            # the softmax's backward: P * (dP - rowsum(P * dP))
            grad_logits = grad_weights.sub_((grad_weights * weights).sum(-1, keepdim=True)).mul_(
                weights)
            del weights
            grad_k += (grad_logits.transpose(-2, -1) @ q32[..., rows, :]).mul_(scale)
            if grad_q is not None:
                grad_q[..., rows, :] = (grad_logits @ k32).mul_(scale)
            if grad_bias is not None:
                _add_bias_grad(grad_bias, grad_logits, start, end)
        return (None if grad_q is None else grad_q.to(q.dtype),
                grad_k.to(k.dtype) if needs[1] else None,
                grad_v.to(v.dtype) if needs[2] else None,
                None if grad_bias is None else grad_bias.to(bias.dtype), None, None)


def _add_bias_grad(grad_bias: torch.Tensor, grad_logits: torch.Tensor, start: int,
                   end: int) -> None:
    """Adds the logits' gradient of query rows ``start:end``, summed to the bias's shape."""
    if grad_bias.dim() >= 2 and grad_bias.shape[-2] != 1:
        target = grad_bias[..., start:end, :]
        target += grad_logits.sum_to_size(target.shape)
    else:
        grad_bias += grad_logits.sum_to_size(grad_bias.shape)
