"""The inverted residual's backward over bands of rows: its expanded maps never exist whole.

:func:`~mmhvit.models.layers.lean.lean_layer` keeps only the input of an inverted residual
(1x1 conv -> depthwise kxk conv -> 1x1 conv, with norms and activations) and recomputes the
expanded maps in backward, where they all exist at once, whole: several maps of 4x-8x the
block's channels at stride 4. :func:`banded_inverted_residual` recomputes and back-propagates
them a band of rows at a time instead (each band with the depthwise kernel's halo rows), so
that backward holds a band of each. Every layer but the depthwise conv and the norms acts on
each pixel alone; the depthwise conv needs the halo, and a BatchNorm in training (the batch's
statistics) or a GroupNorm (each sample's: HAT-Net's) normalises with statistics over all
pixels, whose dependence on every pixel makes its gradient a sum over all bands: one more pass
over the bands per such norm gives those sums (the statistics themselves are kept from the
forward, two small tensors per norm).

The outputs are the plain modules' (the forward runs them as they are, updating the running
statistics once); the gradients equal theirs to float rounding.
"""
from typing import List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .depthwise import depthwise_conv2d, is_depthwise
from .lean import (
    WITHOUT_WEIGHTS,
    has_weights,
    recomputable,
    recompute_module,
    run_chain,
    weights_of,
)
from .norm import LayerNorm2d, is_local_batch_norm, uses_batch_statistics

# Elements of the widest map of a band (its rows chosen to fit): small enough that a band's maps
# come from memory the allocator already holds.
BAND_ELEMENTS = 1 << 21


def statistics_norm(module: nn.Module) -> bool:
    """Whether ``module`` normalises with statistics over many pixels now: a BatchNorm with the
    batch's (training), a GroupNorm (each sample's, HAT-Net's one-group norm)."""
    if isinstance(module, nn.GroupNorm):
        return True
    return is_local_batch_norm(module) and uses_batch_statistics(module)


def _grouped(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``x`` laid out for ``norm``'s statistics: (B, G, C / G, H, W) for a GroupNorm, as it is
    for a BatchNorm."""
    return x.unflatten(1, (norm.num_groups, -1)) if isinstance(norm, nn.GroupNorm) else x


def _per_statistic(norm: nn.Module, values: torch.Tensor) -> torch.Tensor:
    """Statistics ((C, ) of a BatchNorm, (B, G) of a GroupNorm) broadcast over the pixels of
    :func:`_grouped`."""
    return values[..., None, None, None] if isinstance(norm, nn.GroupNorm) else values[:, None,
                                                                                           None]


def _statistics(norm: nn.Module, x: torch.Tensor):
    """The (mean, 1 / std) ``norm`` normalises ``x`` with."""
    grouped = _grouped(norm, x if x.dtype == torch.float64 else x.float())
    dims = (2, 3, 4) if isinstance(norm, nn.GroupNorm) else (0, 2, 3)
    var, mean = torch.var_mean(grouped, dim=dims, unbiased=False)
    return mean, (var + norm.eps).rsqrt()


def _normalise(norm, x, mean, inv_std, weight, bias):
    """``norm`` with the given statistics, differentiable in them."""
    grouped = _grouped(norm, x)
    out = (grouped - _per_statistic(norm, mean).to(x.dtype)) * _per_statistic(
        norm, inv_std).to(x.dtype)
    out = out.flatten(1, 2) if isinstance(norm, nn.GroupNorm) else out
    if weight is not None:
        out = out * weight[:, None, None]
    if bias is not None:
        out = out + bias[:, None, None]
    return out


def _pixelwise(module: nn.Module) -> bool:
    """Whether ``module`` acts on each pixel alone (a BatchNorm: given its statistics)."""
    if isinstance(module, nn.Conv2d):
        return (module.kernel_size == (1, 1) and module.stride == (1, 1)
                and module.padding in ((0, 0), 'valid') and module.groups == 1)
    return (is_local_batch_norm(module) or isinstance(
        module, (LayerNorm2d, nn.Dropout, nn.Dropout2d, *WITHOUT_WEIGHTS))) and recomputable(module)


def _same_size_depthwise(conv: nn.Conv2d) -> bool:
    height, width = conv.kernel_size
    return (is_depthwise(conv) and height % 2 == 1 and width % 2 == 1
            and conv.padding == (height // 2, width // 2))


def banded_applies(head: Sequence[nn.Module], depthwise: nn.Conv2d, tail: Sequence[nn.Module],
                   layer: nn.Conv2d, x: torch.Tensor) -> bool:
    """Whether :func:`banded_inverted_residual` can run ``layer(tail(depthwise(head(x))))``:
    training with gradients, no autocast, ``head`` and ``tail`` made of pixel-wise layers and
    norms, a depthwise conv that keeps the size, a 1x1 conv ``layer``, and more than one band."""
    if not (torch.is_grad_enabled() and layer.training and x.dim() == 4):
        return False
    if any(torch.is_autocast_enabled(device) for device in ('cpu', 'cuda')):
        return False
    if not (all(_pixelwise(m) or statistics_norm(m) for m in (*head, *tail))
            and isinstance(layer, nn.Conv2d) and _pixelwise(layer)
            and isinstance(depthwise, nn.Conv2d) and _same_size_depthwise(depthwise)):
        return False
    return band_rows(x.shape[0], depthwise.out_channels, x.shape[2], x.shape[3]) < x.shape[2]


def band_rows(batch: int, channels: int, height: int, width: int) -> int:
    """Rows per band: the widest map's band within ``BAND_ELEMENTS`` (at least one row)."""
    return max(1, min(height, BAND_ELEMENTS // max(1, batch * channels * width)))


def banded_inverted_residual(head: Sequence[nn.Module], depthwise: nn.Conv2d,
                             tail: Sequence[nn.Module], layer: nn.Conv2d,
                             x: torch.Tensor) -> torch.Tensor:
    """``layer(tail(depthwise(head(x))))``, keeping ``x`` and the BatchNorms' batch statistics
    for backward, which runs a band of rows at a time (see the module's docstring). Call it where
    :func:`banded_applies`."""
    modules = (*head, depthwise, *tail)
    weights = [w for m in modules for w in weights_of(m)]
    return _BandedInvertedResidual.apply(x, (list(head), depthwise, list(tail), layer),
                                         layer.weight, layer.bias, *weights)


def _forward_keeping_statistics(modules, x):
    """The modules as they are; the (mean, 1 / std) each batch-statistics BatchNorm used."""
    statistics, original = [], x
    for module in modules:
        if statistics_norm(module):
            statistics.append(_statistics(module, x))
        if getattr(module, 'inplace', False) and x is original:
            x = x.clone()  # the input is what backward keeps
        x = module(x)
    return x, statistics


class _BandedInvertedResidual(torch.autograd.Function):
    """Inputs: ``x``, ``(head, depthwise, tail, layer)``, the layer's weight and bias, then the
    weights and biases of head, depthwise and tail in turn."""

    @staticmethod
    def forward(ctx, x, segment, weight, bias, *weights):
        head, depthwise, tail, layer = segment
        with torch.no_grad():
            hidden, statistics = _forward_keeping_statistics([*head, depthwise, *tail], x)
            out = layer(hidden)
        ctx.segment, ctx.weights, ctx.statistics = segment, (weight, bias, *weights), statistics
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        band = _Bands(ctx, x)
        # One pass per batch-statistics norm, the last first: the sums over all bands of the
        # gradient reaching its statistics, which the passes after it add to its input's gradient.
        for index in reversed(range(len(ctx.statistics))):
            band.totals[index] = band.statistics_pass(index, grad_out)
        grads = band.final_pass(grad_out)
        return (grads[0], None, *grads[1:])


class _Bands:
    """The backward's state (from the forward's ``ctx`` and its input ``x``): the leaves it
    differentiates and the statistics' gradient sums."""

    def __init__(self, ctx, x):
        self.head, self.depthwise, self.tail, self.layer = ctx.segment
        self.x = x
        needs = ctx.needs_input_grad
        self.needs_x = needs[0]
        self.weights = [None if w is None else w.detach().requires_grad_(need)
                        for w, need in zip(ctx.weights, needs[2:])]
        self.statistics = [(mean.detach().requires_grad_(), inv_std.detach().requires_grad_())
                           for mean, inv_std in ctx.statistics]
        self.totals: List[Optional[tuple]] = [None] * len(self.statistics)
        batch, _, height, width = x.shape
        self.rows = band_rows(batch, self.depthwise.out_channels, height, width)
        self.halo = self.depthwise.padding[0]

    def bands(self):
        """(first row, end row) of each band of output rows."""
        height = self.x.shape[2]
        return [(start, min(start + self.rows, height)) for start in range(0, height, self.rows)]

    def hidden(self, start, end, x_rows):
        """The layer's input on rows [start, end) from ``x_rows``, the rows of x with the halo
        (x[:, :, start - halo: end + halo], clipped to the map)."""
        first = max(0, start - self.halo)
        weights = iter(self.weights[2:])
        statistics = iter(self.statistics)
        totals = iter(self.totals)
        expanded = self._pixelwise(self.head, x_rows, weights, statistics, totals,
                                   (start - first, end - first))
        # Zero rows where the band's halo passes the map's edge: the depthwise conv's padding.
        top, bottom = self.halo - (start - first), self.halo - (
            min(self.x.shape[2], end + self.halo) - end)
        expanded = F.pad(expanded, (0, 0, top, bottom))
        weight, bias = next(weights), next(weights)
        out = depthwise_conv2d(expanded, weight, bias, (0, self.depthwise.padding[1]))
        return self._pixelwise(self.tail, out, weights, statistics, totals, (0, end - start))

    def _pixelwise(self, modules, x, weights, statistics, totals, owned):
        for module in modules:
            if statistics_norm(module):
                mean, inv_std = next(statistics)
                total = next(totals)
                if total is not None and x.requires_grad:
                    x.register_hook(self._statistics_gradient(module, x.detach(), mean, inv_std,
                                                              total, owned))
                weight, bias = next(weights), next(weights)
                x = _normalise(module, x, mean, inv_std, weight, bias)
            elif has_weights(module):
                x = recompute_module(module, x, next(weights), next(weights))
            else:
                x = run_chain([module], x)
        return x

    def _statistics_gradient(self, norm, x, mean, inv_std, total, owned):
        """A hook adding, on the band's own rows, the gradient through the statistics: with
        ``count`` pixels per statistic, d mean / dx = 1 / count and
        d inv_std / dx = -inv_std^3 (x - mean) / count."""
        grad_mean, grad_inv_std = (_per_statistic(norm, t) for t in total)
        mean, inv_std = (_per_statistic(norm, t.detach()) for t in (mean, inv_std))
        batch, _, height, width = self.x.shape
        count = (norm.num_channels // norm.num_groups if isinstance(norm, nn.GroupNorm) else
                 batch) * height * width
        first, end = owned

        def hook(grad):
            rows = _grouped(norm, x[:, :, first:end]).to(mean.dtype) - mean
            extra = (grad_mean - grad_inv_std * inv_std**3 * rows) / count
            if isinstance(norm, nn.GroupNorm):
                extra = extra.flatten(1, 2)
            grad = grad.clone()
            grad[:, :, first:end] += extra.to(grad.dtype)
            return grad
        return hook

    def _band_backward(self, start, end, grad_out, inputs_of):
        first, last = max(0, start - self.halo), min(self.x.shape[2], end + self.halo)
        x_rows = self.x[:, :, first:last].detach().requires_grad_(self.needs_x)
        with torch.enable_grad():
            hidden = self.hidden(start, end, x_rows)
        weight = self.weights[0]
        grad_band = grad_out[:, :, start:end]
        grad_hidden = torch.einsum('bohw,oi->bihw', grad_band, weight.flatten(1))
        inputs = inputs_of(x_rows)
        grads = torch.autograd.grad(hidden, inputs, grad_hidden, allow_unused=True)
        return first, last, hidden.detach(), grad_band, grads

    def statistics_pass(self, index, grad_out):
        """Sums over the bands of the gradient reaching norm ``index``'s (mean, inv_std)."""
        sums = [torch.zeros_like(t) for t in self.statistics[index]]
        for start, end in self.bands():
            *_, grads = self._band_backward(start, end, grad_out,
                                            lambda _: list(self.statistics[index]))
            for total, grad in zip(sums, grads):
                if grad is not None:
                    total += grad
        return sums

    def final_pass(self, grad_out):
        """Gradients of x, the layer's weight and bias, and the other weights."""
        grad_x = torch.zeros_like(self.x) if self.needs_x else None
        leaves = [w for w in self.weights[2:] if w is not None and w.requires_grad]
        weight, bias = self.weights[:2]
        grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
        grad_bias = None if bias is None or not bias.requires_grad else torch.zeros_like(bias)
        sums = {id(w): torch.zeros_like(w) for w in leaves}
        for start, end in self.bands():
            first, last, hidden, grad_band, grads = self._band_backward(
                start, end, grad_out,
                lambda x_rows: ([x_rows] if self.needs_x else []) + leaves)
            if self.needs_x:
                grad_x[:, :, first:last] += grads[0]
                grads = grads[1:]
            for leaf, grad in zip(leaves, grads):
                if grad is not None:
                    sums[id(leaf)] += grad
            if grad_weight is not None:
                grad_weight += torch.einsum('bohw,bihw->oi', grad_band, hidden).view_as(weight)
            if grad_bias is not None:
                grad_bias += grad_band.sum((0, 2, 3))
        return [grad_x, grad_weight, grad_bias,
                *(None if w is None or not w.requires_grad else sums[id(w)]
                  for w in self.weights[2:])]

