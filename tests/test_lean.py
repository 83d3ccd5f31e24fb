"""Memory-lean backward (mmhvit.models.layers.lean): the same outputs, gradients and running
statistics as the plain modules, with less kept for backward."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from mmhvit.models.layers import InvertedResidual, Mlp
from mmhvit.models.layers.depthwise import depthwise_conv2d
from mmhvit.models.layers.lean import lean_layer, recomputable
from mmhvit.testing import FAMILIES, build_tiny
from mmhvit.utils import SavedForBackward

pytestmark = pytest.mark.unit


def saved_bytes(fn):
    """``fn()`` and the bytes autograd keeps for backward while it runs."""
    with SavedForBackward() as saved:
        out = fn()
    return out, saved.bytes


def lean_and_plain(module):
    plain = copy.deepcopy(module)
    for m in plain.modules():
        if hasattr(m, 'lean'):
            m.lean = False
    return module, plain


def run_both(lean, plain, x, seed=None):
    """Outputs, input gradients and parameter gradients of both modules on the same input,
    with the bytes each kept for backward (each run from the random state ``seed``, if given)."""
    return [run_one(module, x, seed) for module in (lean, plain)]


def run_one(module, x, seed=None):
    """``run_both``'s results for one module."""
    if seed is not None:
        torch.manual_seed(seed)
    leaf = x.clone().requires_grad_()
    out, kept = saved_bytes(lambda: module(leaf))
    out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape))
    grads = {name: p.grad for name, p in module.named_parameters()}
    return out.detach(), leaf.grad, grads, kept


def assert_same(lean_result, plain_result):
    out, grad_x, grads, _ = lean_result
    out_p, grad_x_p, grads_p, _ = plain_result
    torch.testing.assert_close(out, out_p)
    torch.testing.assert_close(grad_x, grad_x_p)
    assert grads.keys() == grads_p.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], grads_p[name], msg=name)


@pytest.mark.parametrize('memory_format', [torch.channels_last, torch.contiguous_format])
@pytest.mark.parametrize('layout, norm_cfg', [('post', dict(type='BN')),
                                              ('pre', dict(type='GN', num_groups=1, eps=1e-6))])
def test_lean_inverted_residual_equals_the_plain_one_and_keeps_less(layout, norm_cfg,
                                                                    memory_format):
    """Both layouts: conv3's gradients are products of NHWC views for channels-last maps, of
    (channels, pixels) views for NCHW ones."""
    torch.manual_seed(0)
    block = InvertedResidual(8, 32, kernel_size=3, norm_cfg=norm_cfg, norm_layout=layout)
    block = block.double().train()
    for m in block.modules():  # non-trivial affine parameters
        if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.normal_(m.weight, 1, .3)
            nn.init.normal_(m.bias, 0, .3)
    lean, plain = lean_and_plain(block)
    x = torch.randn(2, 8, 11, 13, dtype=torch.float64).contiguous(memory_format=memory_format)
    lean_result, plain_result = run_both(lean, plain, x)
    assert_same(lean_result, plain_result)
    # BatchNorm's running statistics moved once, as the plain block's
    for buffer, buffer_p in zip(lean.buffers(), plain.buffers()):
        torch.testing.assert_close(buffer, buffer_p)
    assert lean_result[3] < .75 * plain_result[3], (lean_result[3], plain_result[3])


class CountBatchNorms(TorchFunctionMode):
    """Counts the ``F.batch_norm`` calls made while it is on."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += func is F.batch_norm
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize('kernel', [3, 5])
def test_lean_inverted_residual_folds_frozen_batch_norms_into_its_convs(kernel):
    """norm_eval: the BatchNorms after conv1 and the depthwise conv, with running statistics,
    run as those convs with scaled weights and a bias, in forward and in the recompute: the
    plain block's outputs and gradients (the norms' weights and biases included), and only
    norm3 (outside the recompute) calls batch_norm."""
    torch.manual_seed(0)
    block = InvertedResidual(8, 32, kernel_size=kernel).double().train()
    for m in block.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1, .3)
            nn.init.normal_(m.bias, 0, .3)
            m.running_mean.normal_(0, .5)
            m.running_var.uniform_(.5, 2)
            m.eval()  # what norm_eval does
    lean, plain = lean_and_plain(block)
    x = torch.randn(2, 8, 11, 13, dtype=torch.float64).contiguous(
        memory_format=torch.channels_last)
    results, calls = [], []
    for module in (lean, plain):
        with CountBatchNorms() as counter:
            results.append(run_one(module, x))
        calls.append(counter.calls)
    assert_same(*results)
    assert calls == [1, 3]


@pytest.mark.parametrize('attn_drop_rate', [0., .2])
def test_lean_hmhsa_equals_the_plain_one_and_keeps_x_only(attn_drop_rate):
    """Official windowed H-MHSA: the norm, the qkv projection and the window attention are
    recomputed in backward (padded windows included); with attention dropout, only the norm."""
    from mmhvit.models.layers import HMHSA
    torch.manual_seed(0)
    attn = HMHSA(8, 2, grid_size=4, ds_ratio=2, attn_drop_rate=attn_drop_rate).double().train()
    for m in attn.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1, .3)
            nn.init.normal_(m.bias, 0, .3)
    lean, plain = lean_and_plain(attn)
    x = torch.randn(2, 8, 11, 13, dtype=torch.float64)
    lean_result, plain_result = run_both(lean, plain, x, seed=1)
    assert_same(lean_result, plain_result)
    for buffer, buffer_p in zip(lean.buffers(), plain.buffers()):
        torch.testing.assert_close(buffer, buffer_p)
    ratio = .6 if attn_drop_rate == 0 else .95
    assert lean_result[3] < ratio * plain_result[3], (lean_result[3], plain_result[3])


def test_lean_mlp_with_its_norm_equals_the_plain_one_and_keeps_less():
    torch.manual_seed(0)
    mlp, norm = Mlp(16, 64).double(), nn.LayerNorm((4, 16)).double()
    nn.init.normal_(norm.weight, 1, .3)

    class Layer(nn.Module):  # the MLP branch of a transformer layer: mlp(norm2(x))
        def __init__(self):
            super().__init__()
            self.mlp, self.norm2 = mlp, norm

        def forward(self, x):
            return self.mlp(x, self.norm2)

    lean, plain = lean_and_plain(Layer().train())
    lean_result, plain_result = run_both(lean, plain,
                                         torch.randn(6, 4, 16, dtype=torch.float64))
    assert_same(lean_result, plain_result)
    assert lean_result[3] < .75 * plain_result[3], (lean_result[3], plain_result[3])


def test_lean_pyramid_tnt_upsample_equals_the_plain_one_and_keeps_less():
    """PyramidTNT's dense-output upsampling: the 3x3 conv's input (norm and GELU of the
    transposed conv's output) recomputed in backward; BatchNorm statistics moved once."""
    from mmhvit.models.layers import PyramidTNTUpsample
    torch.manual_seed(0)
    upsample = PyramidTNTUpsample(8, dict(type='BN')).double().train()
    for m in upsample.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1, .3)
            nn.init.normal_(m.bias, 0, .3)
    lean, plain = lean_and_plain(upsample)
    lean_result, plain_result = run_both(lean, plain,
                                         torch.randn(2, 8, 5, 7, dtype=torch.float64))
    assert lean_result[0].shape == (2, 8, 10, 14)
    assert_same(lean_result, plain_result)
    for buffer, buffer_p in zip(lean.buffers(), plain.buffers()):
        torch.testing.assert_close(buffer, buffer_p)
    assert lean_result[3] < .75 * plain_result[3], (lean_result[3], plain_result[3])


def test_lean_layer_takes_the_plain_path_where_it_cannot_recompute_exactly():
    from mmengine.model import revert_sync_batchnorm
    assert not recomputable(nn.SyncBatchNorm(4))
    # SyncBN as MMEngine's Runner reverts it for one process: a BatchNorm's forward
    assert recomputable(revert_sync_batchnorm(nn.Sequential(nn.SyncBatchNorm(4)))[0])
    assert not recomputable(nn.Dropout(.1).train()) and recomputable(nn.Dropout(.1).eval())
    assert recomputable(nn.Dropout(0.).train()) and recomputable(nn.BatchNorm2d(4))
    conv, norm = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)
    x = torch.randn(1, 4, 3, 3, requires_grad=True)
    assert lean_layer([norm], conv, x).grad_fn.name() == '_LeanLayerBackward'
    assert lean_layer([norm], conv, x, lean=False).grad_fn.name() != '_LeanLayerBackward'
    assert lean_layer([nn.Dropout(.5)], conv, x).grad_fn.name() != '_LeanLayerBackward'
    with torch.no_grad():
        assert lean_layer([norm], conv, x).grad_fn is None
    conv.eval()
    assert lean_layer([norm], conv, x).grad_fn.name() != '_LeanLayerBackward'


def test_lean_layer_never_overwrites_the_input_it_keeps():
    """An in-place activation first in the chain works on a copy: the kept input stays."""
    conv, act = nn.Conv2d(4, 4, 1).double(), nn.SiLU(inplace=True)
    x = torch.randn(1, 4, 3, 3, dtype=torch.float64, requires_grad=True)
    h = x * 1
    before = h.clone()
    out = lean_layer([act], conv, h)
    torch.testing.assert_close(h, before)
    out.sum().backward()
    expected = torch.autograd.grad(conv(torch.nn.functional.silu(x)).sum(), x)[0]
    torch.testing.assert_close(x.grad, expected)


@pytest.mark.parametrize('name, extra, row_chunk', [
    *((name, {}, None) for name in sorted(FAMILIES)),
    ('PyramidTNT', dict(recompute_attention=False), None),
    # the long attention recomputed (the default), its bias rows made with the query chunks, a
    # grid row of queries at a time
    ('PyramidTNT', {}, 1)])
def test_every_family_gives_the_same_outputs_and_gradients_lean_or_not(name, extra, row_chunk,
                                                                       monkeypatch):
    from mmhvit.models.layers import recomputed_attention
    if row_chunk:
        monkeypatch.setattr(recomputed_attention, 'CHUNK_ELEMENTS', row_chunk)
    torch.manual_seed(0)
    model = build_tiny(name, **extra).double().train()
    plain = build_tiny(name, lean_backward=False)
    plain.load_state_dict(model.state_dict())
    plain = plain.double().train()
    x = torch.randn(2, 3, 70, 90, dtype=torch.float64)
    results = []
    for module in (model, plain):
        leaf = x.clone().requires_grad_()
        outs = module(leaf)
        sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape)).sum()
            for o in outs).backward()
        results.append(([o.detach() for o in outs], leaf.grad,
                        {n: p.grad for n, p in module.named_parameters()}))
    for out, out_p in zip(results[0][0], results[1][0]):
        torch.testing.assert_close(out, out_p)
    torch.testing.assert_close(results[0][1], results[1][1])
    for key, grad in results[0][2].items():
        torch.testing.assert_close(grad, results[1][2][key], msg=key)
    assert any(getattr(m, 'lean', False) for m in model.modules())
    assert not any(getattr(m, 'lean', False) for m in plain.modules())


def test_lean_block_under_bfloat16_autocast_matches_the_plain_one():
    """The recompute replays the forward's autocast: the same bfloat16 numbers."""
    torch.manual_seed(0)
    block = InvertedResidual(8, 32, kernel_size=3, norm_layout='post').train()
    lean, plain = lean_and_plain(block)
    x = torch.randn(2, 8, 9, 10)
    results = []
    for module in (lean, plain):
        leaf = x.clone().requires_grad_()
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = module(leaf)
        out.float().sum().backward()
        results.append((out, leaf.grad, [p.grad for p in module.parameters()]))
    assert results[0][0].dtype == torch.bfloat16
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1], atol=2e-2, rtol=2e-2)
    for grad, grad_p in zip(results[0][2], results[1][2]):
        assert grad.dtype == torch.float32
        torch.testing.assert_close(grad, grad_p, atol=5e-2, rtol=2e-2)


# chunks: one query row of every entry at a time (16 chunks); one entry at a time (3 chunks)
@pytest.mark.parametrize('dropout_p, chunk_elements', [(0., None), (0., 1), (0., 2 * 16 * 16),
                                                       (.3, None)])
def test_recomputed_attention_weights_equal_the_kept_ones_and_keep_less(
        dropout_p, chunk_elements, monkeypatch):
    """The matmul kernel with ``recompute`` keeps only its inputs (and, without dropout, a
    log-sum-exp per query) and gives the same outputs and gradients (with dropout, the same mask
    drawn again), bias and padded keys included, in one pass, a few query rows or a batch entry at
    a time."""
    from mmhvit.models.layers import multihead_attention, recomputed_attention
    if chunk_elements:
        monkeypatch.setattr(recomputed_attention, 'CHUNK_ELEMENTS', chunk_elements)
    torch.manual_seed(0)
    q, k, v = (torch.randn(6, 16, 8, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(1, 2, 16, 16, dtype=torch.float64)
    key_mask = torch.ones(3, 16, dtype=torch.bool)
    key_mask[1, 12:] = False
    results = []
    for recompute in (True, False):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, bias)]
        torch.manual_seed(1)
        out, kept = saved_bytes(lambda: multihead_attention(
            *leaves[:3], 2, key_mask=key_mask, kernel='matmul', attn_bias=leaves[3],
            dropout_p=dropout_p, recompute=recompute))
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape))
        results.append((out.detach(), [t.grad for t in leaves], kept))
    torch.testing.assert_close(results[0][0], results[1][0])
    for grad, grad_p in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(grad, grad_p)
    assert results[0][2] < results[1][2]


def test_long_attention_keeps_its_weights_unless_asked():
    """``recompute`` alone covers short key sequences (windows, words); ``recompute_long``
    the rest."""
    from mmhvit.models.layers import multihead_attention
    from mmhvit.models.layers.attention import CPU_SHORT_SEQUENCE
    q, k, v = (torch.randn(2, CPU_SHORT_SEQUENCE + 16, 8, requires_grad=True) for _ in range(3))
    kept = [saved_bytes(lambda: multihead_attention(q, k, v, 2, kernel='matmul', **kwargs))[1]
            for kwargs in (dict(), dict(recompute=True),
                           dict(recompute=True, recompute_long=True))]
    assert kept[0] == kept[1] > kept[2]


@pytest.mark.parametrize('kernel, padding, layout', [
    ((5, 5), (2, 2), torch.channels_last),  # TransCNN's: 3 x 3 tiles of the weight gradient
    ((3, 5), (1, 2), torch.contiguous_format),
    ((7, 3), (0, 1), torch.channels_last),  # the banded backward's rows: no row padding
    ((5, 5), (2, 2), torch.contiguous_format)])
def test_depthwise_conv_gradients_equal_autograds(kernel, padding, layout):
    """The depthwise conv the lean and banded backwards recompute: its gradients, made as forward
    convolutions, equal those of autograd's ``F.conv2d``."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 11, 13, dtype=torch.float64).contiguous(memory_format=layout)
    weight = torch.randn(6, 1, *kernel, dtype=torch.float64)
    bias = torch.randn(6, dtype=torch.float64)
    results, names = [], []
    for conv in (depthwise_conv2d, lambda x, w, b, p: F.conv2d(x, w, b, padding=p, groups=6)):
        leaves = [t.clone().requires_grad_() for t in (x, weight, bias)]
        out = conv(*leaves, padding)
        names.append(type(out.grad_fn).__name__)
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape))
        results.append((out.detach(), *(t.grad for t in leaves)))
    assert results[0][0].shape == (2, 6, 11 + 2 * padding[0] - kernel[0] + 1,
                                   13 + 2 * padding[1] - kernel[1] + 1)
    assert names == ['_DepthwiseConv2dBackward', 'ConvolutionBackward0']
    for ours, autograds in zip(*results):
        torch.testing.assert_close(ours, autograds)
