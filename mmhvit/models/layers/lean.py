"""Memory-lean training: what feeds a conv or linear layer recomputed in backward instead of kept.

A conv or linear layer keeps its input for the gradient of its weight. When that input is made
from a tensor that autograd keeps anyway by work that is cheap to repeat (a norm, an activation,
a depthwise conv, or a projection whose output would be larger than its input: the expanding
1x1 conv of an inverted residual, an MLP's fc1), ``layer(chain(x))`` needs only ``x``:
:func:`lean_layer` computes it that way, keeping ``x`` and recomputing ``chain(x)`` in backward.
Outputs, gradients and BatchNorm running statistics are those of the plain modules (up to
rounding where a norm is folded); the backward of ``layer`` uses the kernels autograd would
(:mod:`torch.nn.grad`), so ``layer``'s forward is not repeated.

Two things make the recompute cheaper than the plain modules' backward: a conv followed by a
BatchNorm that normalises with its running statistics (``norm_eval``) runs as one conv with the
norm folded into its weight and bias (:func:`conv_with_frozen_norm`, in forward too), and the
activations whose backward reads their input run out of place, their backward overwriting the
gradient it is given (:class:`_RecomputedActivation`): fewer maps made, each a fresh allocation.

It applies while training with gradients, to the modules it can recompute exactly
(:func:`recomputable`: norms without state and BatchNorm, whose running statistics are updated
once, in forward; activations; convs and linear layers; dropout with p = 0). Anything else
(SyncBN, a dropout that draws a mask) takes the plain path. The recompute reads the weights the
forward was given (not the modules' attributes at backward time, which FSDP swaps) and replays
the forward's autocast.
"""
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .depthwise import depthwise_conv2d, is_depthwise, memory_format
from .norm import LayerNorm2d, is_local_batch_norm, uses_batch_statistics


class ChannelsLast(nn.Module):
    """NCHW -> NHWC (a permuted view): a map's pixels as tokens for a linear layer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1)


TO_CHANNELS_LAST = ChannelsLast()  # holds nothing: one instance serves every caller

# LayerNorm2d is a LayerNorm. BatchNorms: is_local_batch_norm (not SyncBatchNorm: its recompute
# would all-reduce again).
WEIGHTED = (nn.GroupNorm, nn.LayerNorm, nn.Conv2d, nn.Linear)
WITHOUT_WEIGHTS = (nn.Identity, ChannelsLast, nn.SiLU, nn.GELU, nn.ReLU, nn.ReLU6, nn.Hardswish,
                   nn.Sigmoid, nn.Tanh)
AUTOCAST_DEVICES = ('cpu', 'cuda')


def recomputable(module: nn.Module) -> bool:
    """Whether :func:`lean_layer` can recompute ``module`` exactly in backward."""
    if isinstance(module, nn.SyncBatchNorm):
        return False
    if isinstance(module, (nn.Dropout, nn.Dropout2d)):
        return module.p == 0 or not module.training
    if isinstance(module, nn.Conv2d):
        return module.padding_mode == 'zeros'
    return has_weights(module) or isinstance(module, WITHOUT_WEIGHTS)


def has_weights(module: nn.Module) -> bool:
    """Whether ``module`` is one of the recomputable modules with a weight and bias."""
    return is_local_batch_norm(module) or isinstance(module, WEIGHTED)


def weights_of(module: nn.Module) -> List[Optional[torch.Tensor]]:
    """``[weight, bias]`` of a module with weights (either may be None), ``[]`` otherwise."""
    if not has_weights(module):
        return []
    return [module.weight, module.bias]


def recompute_module(module: nn.Module, x: torch.Tensor, weight=None,
                     bias=None) -> torch.Tensor:
    """``module(x)`` again in backward, with the ``weight`` and ``bias`` the forward used; a
    BatchNorm normalises as it did (the batch's statistics in training) without updating its
    running statistics a second time."""
    if is_local_batch_norm(module):
        use_batch = uses_batch_statistics(module)
        running = (None, None) if use_batch else (module.running_mean, module.running_var)
        return F.batch_norm(x, *running, weight, bias, use_batch, 0., module.eps)
    if isinstance(module, LayerNorm2d):
        return F.layer_norm(x.permute(0, 2, 3, 1), module.normalized_shape, weight, bias,
                            module.eps).permute(0, 3, 1, 2)
    if isinstance(module, nn.LayerNorm):
        return F.layer_norm(x, module.normalized_shape, weight, bias, module.eps)
    if isinstance(module, nn.GroupNorm):
        return F.group_norm(x, module.num_groups, weight, bias, module.eps)
    if isinstance(module, (nn.Conv2d, nn.Linear)):
        return _layer_forward(module, x, weight, bias)
    return module(x)


def run_chain(modules: Sequence[nn.Module], x: torch.Tensor,
              weights: Optional[Sequence] = None, fold: bool = False) -> torch.Tensor:
    """``modules`` in turn on ``x``: as they are (forward), or recomputed with ``weights``, two
    entries (weight, bias) per module that has them (backward). With ``fold`` (the lean path), a
    conv followed by a frozen BatchNorm (:func:`folds_into`) runs as one conv."""
    recompute = weights is not None
    weights = iter(weights if recompute else [w for m in modules for w in weights_of(m)])
    steps = [(m, [next(weights), next(weights)] if has_weights(m) else []) for m in modules]
    original, i = x, 0
    while i < len(steps):
        module, params = steps[i]
        if getattr(module, 'inplace', False) and x is original:
            x = x.clone()  # never overwrite the input: it is what backward keeps
        if fold and i + 1 < len(steps) and folds_into(module, steps[i + 1][0]):
            norm, norm_params = steps[i + 1]
            x = conv_with_frozen_norm(module, norm, x, params + norm_params)
            i += 2
            continue
        if recompute and params:
            x = recompute_module(module, x, *params)
        elif recompute and type(module) in ACTIVATIONS and torch.is_grad_enabled():
            x = _RecomputedActivation.apply(x, module)
        else:
            x = module(x)
        i += 1
    return x


# Activations whose backward reads their input, for :class:`_RecomputedActivation`: ``forward(
# module, x)`` out of place and ``grad(module, grad, x)`` overwriting ``grad``.
ACTIVATIONS = {
    nn.SiLU: (lambda module, x: F.silu(x),
              lambda module, grad, x: torch.ops.aten.silu_backward.grad_input(
                  grad, x, grad_input=grad)),
    nn.GELU: (lambda module, x: F.gelu(x, approximate=module.approximate),
              lambda module, grad, x: torch.ops.aten.gelu_backward.grad_input(
                  grad, x, approximate=module.approximate, grad_input=grad)),
}


class _RecomputedActivation(torch.autograd.Function):
    """An activation of the recompute: out of place (autograd would copy the input of an
    in-place one, which its backward reads), its backward overwriting the gradient it is given
    instead of making another map: that gradient is the chain's own, made by the next module's
    backward (or :func:`_layer_grads`) for this activation alone."""

    @staticmethod
    def forward(ctx, x, module):
        ctx.module = module
        ctx.save_for_backward(x)
        return ACTIVATIONS[type(module)][0](module, x)

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        grad = grad.contiguous(memory_format=memory_format(x))
        return ACTIVATIONS[type(ctx.module)][1](ctx.module, grad, x), None


def folds_into(conv: nn.Module, norm: nn.Module) -> bool:
    """Whether ``norm(conv(x))`` runs as one conv (:func:`conv_with_frozen_norm`): a conv and,
    after it, a BatchNorm that normalises with its running statistics (``norm_eval``), with no
    autocast on (which would run the two in different precisions)."""
    return (isinstance(conv, nn.Conv2d) and recomputable(conv) and is_local_batch_norm(norm)
            and not uses_batch_statistics(norm)
            and not any(torch.is_autocast_enabled(d) for d in AUTOCAST_DEVICES))


def conv_with_frozen_norm(conv: nn.Conv2d, norm: nn.Module, x: torch.Tensor,
                          params: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    """``norm(conv(x))`` for a frozen BatchNorm, whose forward is the per-channel affine map
    ``y * scale + shift``: the conv with its weight scaled and that shift as its bias, so that
    no normalised copy of the map is made, kept or recomputed (the same numbers up to rounding).
    ``params``: the conv's weight and bias, then the norm's; their gradients flow through the
    folding (``norm.weight``'s from the conv's weight gradient)."""
    conv_weight, conv_bias, norm_weight, norm_bias = params
    scale = torch.rsqrt(norm.running_var + norm.eps)
    if norm_weight is not None:
        scale = scale * norm_weight
    shift = -norm.running_mean * scale
    if conv_bias is not None:
        shift = shift + conv_bias * scale
    if norm_bias is not None:
        shift = shift + norm_bias
    weight = conv_weight * scale.reshape(-1, *[1] * (conv_weight.dim() - 1))
    return _layer_forward(conv, x, weight, shift)


def lean_applies(modules: Sequence[Optional[nn.Module]], layer: nn.Module) -> bool:
    """Whether ``layer(modules(x))`` takes the lean path: training with gradients, a plain conv
    or linear layer, and modules (None entries skipped) it can recompute."""
    plain_layer = isinstance(layer, nn.Linear) or (isinstance(layer, nn.Conv2d)
                                                    and recomputable(layer))
    return (torch.is_grad_enabled() and layer.training and plain_layer
            and all(recomputable(m) for m in modules if m is not None))


def lean_layer(modules: Sequence[Optional[nn.Module]], layer: nn.Module, x: torch.Tensor,
               lean: bool = True, then: Optional[Callable] = None) -> torch.Tensor:
    """``layer(modules(x))`` (``modules`` in turn, None entries skipped, then a conv or linear
    ``layer``), keeping only ``x`` for backward where :func:`lean_applies` (and ``lean``).

    ``then`` (optional): a function of ``layer``'s output, ``then(layer(modules(x)))``, that is
    recomputed in backward too (e.g. window attention on the projected tokens: what it would keep
    is larger than ``x``). It must be deterministic and update no state.
    """
    modules = [m for m in modules if m is not None]
    if not (lean and lean_applies(modules, layer)) or (then is None and all(
            isinstance(m, (nn.Identity, ChannelsLast)) for m in modules)):
        # (With nothing to recompute, ``layer`` keeps ``x`` anyway.)
        out = layer(run_chain(modules, x))
        return out if then is None else then(out)
    weights = [w for m in modules for w in weights_of(m)]
    return _LeanLayer.apply(x, (modules, layer, then), layer.weight, layer.bias, *weights)


class _LeanLayer(torch.autograd.Function):
    """Inputs: ``x``, ``(modules, layer, then)``, the layer's weight and bias, then the chain's
    weights and biases (inputs, so that autograd routes their gradients)."""

    @staticmethod
    def forward(ctx, x, segment, weight, bias, *weights):
        modules, layer, then = segment
        with torch.no_grad():
            out = layer(run_chain(modules, x, fold=True))
            if then is not None:
                out = then(out)
        ctx.segment, ctx.weights = segment, (weight, bias, *weights)
        ctx.autocast = autocast_states()
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        modules, layer, then = ctx.segment
        needs = ctx.needs_input_grad
        leaf = x.detach().requires_grad_(needs[0])
        leaves = [None if w is None else w.detach().requires_grad_(need)
                  for w, need in zip(ctx.weights, needs[2:])]
        weight, bias, *weights = leaves
        with torch.enable_grad(), replayed_autocast(ctx.autocast):
            hidden = run_chain(modules, leaf, weights, fold=True)
            if then is not None:  # the layer and ``then`` recomputed, autograd's backward
                out = then(_layer_forward(layer, hidden, weight, bias))
        if then is None:  # the layer's gradients by hand: its output is not needed
            grad_hidden, grad_weight, grad_bias = _layer_grads(layer, hidden.detach(), grad_out,
                                                               weight, bias, needs[2:4])
            out, grad_out = hidden, grad_hidden
            leaves = [leaf, *weights]
        else:
            grad_weight = grad_bias = None
            leaves = [leaf, *leaves]
        inputs = [t for t in leaves if t is not None and t.requires_grad]
        grads = dict(zip(map(id, inputs), torch.autograd.grad(
            out, inputs, grad_out, allow_unused=True))) if inputs else {}
        if then is not None:
            grad_weight, grad_bias = (None if w is None else grads.get(id(w))
                                      for w in (weight, bias))
        return (grads.get(id(leaf)), None, grad_weight, grad_bias,
                *(None if w is None else grads.get(id(w)) for w in weights))


def _layer_forward(layer: nn.Module, hidden: torch.Tensor, weight, bias) -> torch.Tensor:
    """``layer(hidden)`` with the given ``weight`` and ``bias``."""
    if isinstance(layer, nn.Linear):
        return F.linear(hidden, weight, bias)
    if is_depthwise(layer):  # its backward as forward convs (see layers.depthwise)
        return depthwise_conv2d(hidden, weight, bias, layer.padding)
    return F.conv2d(hidden, weight, bias, layer.stride, layer.padding, layer.dilation,
                    layer.groups)


def autocast_states() -> List[tuple]:
    """``[(device, dtype), ...]`` of the autocast states on now, for :class:`replayed_autocast`."""
    return [(device, torch.get_autocast_dtype(device))
            for device in AUTOCAST_DEVICES if torch.is_autocast_enabled(device)]


class replayed_autocast:
    """The autocast states ``[(device, dtype), ...]`` a forward ran under, entered again."""

    def __init__(self, states):
        self.contexts = [torch.autocast(device, dtype=dtype) for device, dtype in states]

    def __enter__(self):
        for context in self.contexts:
            context.__enter__()

    def __exit__(self, *exc):
        for context in reversed(self.contexts):
            context.__exit__(*exc)


def _layer_grads(layer: nn.Module, hidden: torch.Tensor, grad_out: torch.Tensor, weight, bias,
                 needs: Sequence[bool]):
    """Gradients of ``layer(hidden)`` w.r.t. its input, ``weight`` and ``bias``, from
    ``grad_out`` (in ``grad_out``'s dtype, as autocast ran the layer, then cast back to each
    input's)."""
    dtype = grad_out.dtype
    grad_weight = grad_bias = None
    if isinstance(layer, nn.Linear):
        grad_hidden = grad_out @ weight.to(dtype)
        flat_grad = grad_out.reshape(-1, grad_out.shape[-1])
        if needs[0]:
            grad_weight = flat_grad.t() @ hidden.reshape(-1, hidden.shape[-1]).to(dtype)
        if needs[1]:
            grad_bias = flat_grad.sum(0)
    else:
        if _is_pointwise(layer):
            grad_hidden, grad_weight = _pointwise_grads(hidden, grad_out, weight.to(dtype),
                                                        needs[0])
        else:
            args = (layer.stride, layer.padding, layer.dilation, layer.groups)
            grad_hidden = torch.nn.grad.conv2d_input(hidden.shape, weight.to(dtype), grad_out,
                                                     *args)
            grad_hidden = grad_hidden.contiguous(memory_format=memory_format(hidden))
            if needs[0]:
                grad_weight = torch.nn.grad.conv2d_weight(hidden.to(dtype), weight.shape,
                                                          grad_out, *args)
        if needs[1]:
            grad_bias = grad_out.sum((0, 2, 3))
    return (grad_hidden.to(hidden.dtype),
            None if grad_weight is None else grad_weight.to(weight.dtype),
            None if grad_bias is None else grad_bias.to(bias.dtype))


def _pointwise_grads(hidden: torch.Tensor, grad_out: torch.Tensor, weight: torch.Tensor,
                     weight_needed: bool):
    """The input's and the weight's gradients of a 1x1 conv, a linear layer over the channels:
    matrix products on (channels, pixels) views of each image for NCHW maps, on (pixels,
    channels) views for channels-last ones, so that neither layout is copied to the other; the
    input's gradient in the input's layout."""
    matrix = weight.flatten(1)  # (out, in)
    grad_weight = None
    if hidden.is_contiguous() and grad_out.is_contiguous():
        grad_flat = grad_out.flatten(2)  # (N, out, H * W)
        grad_hidden = (matrix.t() @ grad_flat).view(hidden.shape)
        if weight_needed:
            products = grad_flat @ hidden.flatten(2).to(grad_out.dtype).transpose(1, 2)
            grad_weight = products.sum(0).view(weight.shape)
        return grad_hidden, grad_weight
    grad_nhwc = grad_out.permute(0, 2, 3, 1)
    grad_hidden = (grad_nhwc @ matrix).permute(0, 3, 1, 2).contiguous(
        memory_format=memory_format(hidden))
    if weight_needed:
        hidden_flat = hidden.permute(0, 2, 3, 1).reshape(-1, hidden.shape[1]).to(grad_out.dtype)
        grad_weight = (grad_nhwc.reshape(-1, grad_out.shape[1]).t() @ hidden_flat).view(
            weight.shape)
    return grad_hidden, grad_weight


def _is_pointwise(layer: nn.Conv2d) -> bool:
    return (layer.kernel_size == (1, 1) and layer.stride == (1, 1) and layer.groups == 1
            and layer.padding in ((0, 0), 'valid'))
