"""The inverted residual's backward over bands of rows (mmhvit.models.layers.banded): the plain
block's outputs, gradients and running statistics, with no expanded map whole in backward."""
import copy

import pytest
import torch
import torch.nn as nn

from mmhvit.models.layers import InvertedResidual, banded
from mmhvit.testing import build_tiny

pytestmark = pytest.mark.unit


def irb(layout, kernel_size=3, norm_cfg=dict(type='BN')):
    torch.manual_seed(0)
    block = InvertedResidual(8, 32, kernel_size=kernel_size, norm_cfg=norm_cfg,
                             norm_layout=layout).double().train()
    for m in block.modules():  # non-trivial affine parameters
        if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.normal_(m.weight, 1, .3)
            nn.init.normal_(m.bias, 0, .3)
    return block


def banded_and_plain(block):
    plain = copy.deepcopy(block)
    plain.lean = False
    block.banded_backward = True
    return block, plain


class LargestSaved(torch.autograd.graph.saved_tensors_hooks):
    """The most elements of one tensor that autograd saves while this is entered."""

    def __init__(self):
        self.numel = 0

        def pack(tensor):
            self.numel = max(self.numel, tensor.numel())
            return tensor
        super().__init__(pack, lambda tensor: tensor)


def run(block, x, input_grad=True):
    """Output, gradients (input, then parameters by name), running statistics, and the largest
    tensor saved while backward ran (its recompute)."""
    leaf = x.clone().requires_grad_(input_grad)
    out = block(leaf)
    largest = LargestSaved()
    with largest:
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape))
    grads = {'x': leaf.grad, **{n: p.grad for n, p in block.named_parameters()}}
    return out.detach(), grads, [b.clone() for b in block.buffers()], largest.numel


def assert_same(result, expected):
    out, grads, buffers, _ = result
    torch.testing.assert_close(out, expected[0])
    assert grads.keys() == expected[1].keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected[1][name], msg=name)
    for buffer, buffer_p in zip(buffers, expected[2]):  # running statistics moved once
        torch.testing.assert_close(buffer, buffer_p)


GROUP_NORM = dict(type='GN', num_groups=1, eps=1e-6)  # HAT-Net's


@pytest.mark.parametrize('layout, norm_cfg, kernel_size, rows, input_grad', [
    ('post', dict(type='BN'), 3, 3, True), ('post', dict(type='BN'), 5, 4, True),
    ('post', dict(type='BN'), 5, 2, False), ('pre', dict(type='BN'), 5, 3, True),
    ('pre', GROUP_NORM, 3, 1, True), ('pre', GROUP_NORM, 5, 4, True),
    ('post', dict(type='GN', num_groups=4), 3, 3, True)])
def test_banded_inverted_residual_equals_the_plain_one_without_a_whole_map(
        layout, norm_cfg, kernel_size, rows, input_grad, monkeypatch):
    """Bands of ``rows`` rows (13 is no multiple of them), halos across band edges and the
    map's; TransCNN's two batch-statistics norms after the expansion, HAT-Net's one-group
    GroupNorm before it, GroupNorms of several groups."""
    x = torch.randn(2, 8, 13, 7, dtype=torch.float64).contiguous(
        memory_format=torch.channels_last)
    monkeypatch.setattr(banded, 'BAND_ELEMENTS', 2 * 32 * 7 * rows)
    lean = irb(layout, kernel_size, norm_cfg)
    block, plain = banded_and_plain(copy.deepcopy(lean))
    result, expected = run(block, x, input_grad), run(plain, x, input_grad)
    assert_same(result, expected)
    # The lean block's backward recomputes whole expanded maps; the banded one's a band of them
    # with its halo at most.
    halo = kernel_size // 2
    assert run(lean, x, input_grad)[3] >= 2 * 32 * 13 * 7
    assert result[3] <= 2 * 32 * (rows + 2 * halo) * 7, result[3]


def test_banded_inverted_residual_with_frozen_norms(monkeypatch):
    """Norms in eval mode (norm_eval) normalise with their running statistics: no extra pass."""
    monkeypatch.setattr(banded, 'BAND_ELEMENTS', 32 * 7 * 5)
    block, plain = banded_and_plain(irb('post'))
    for m in (block, plain):
        for norm in m.modules():
            if isinstance(norm, nn.BatchNorm2d):
                norm.eval()
    x = torch.randn(1, 8, 13, 7, dtype=torch.float64)
    assert banded.band_rows(1, 32, 13, 7) == 5
    result, expected = run(block, x), run(plain, x)
    assert_same(result, expected)
    assert result[3] <= 32 * (5 + 2) * 7


@pytest.mark.parametrize('case', ['autocast', 'one band', 'dropout'])
def test_banded_inverted_residual_takes_the_lean_path_where_bands_do_not_apply(case,
                                                                               monkeypatch):
    """Autocast, maps that fit one band and a dropout that draws a mask take the lean path."""
    x = torch.randn(2, 8, 13, 7, dtype=torch.float64)
    if case != 'one band':
        monkeypatch.setattr(banded, 'BAND_ELEMENTS', 2 * 32 * 7 * 3)
    block = irb('pre')
    block.drop.p = .1 if case == 'dropout' else 0.
    head = [block.pre_norm, block.conv1, block.norm1, block.act]
    tail = [block.norm2, block.act, block.drop]
    with torch.autocast('cpu', enabled=case == 'autocast'):
        assert not banded.banded_applies(head, block.conv2, tail, block.conv3, x)
    if case != 'dropout':  # (a mask drawn twice would differ)
        block, plain = banded_and_plain(block)
        assert_same(run(block, x), run(plain, x))


@pytest.mark.parametrize('name', ['TransCNN', 'HATNet'])
def test_with_cp_backbones_run_their_inverted_residuals_in_bands(name, monkeypatch):
    """``with_cp`` turns the bands on: the same outputs and gradients as the plain backbone."""
    monkeypatch.setattr(banded, 'BAND_ELEMENTS', 1)  # one row per band
    torch.manual_seed(0)
    model = build_tiny(name, with_cp=True).double().train()
    plain = build_tiny(name, lean_backward=False)
    plain.load_state_dict(model.state_dict())
    plain = plain.double().train()
    assert all(m.banded_backward for m in model.modules() if isinstance(m, InvertedResidual))
    assert not any(m.banded_backward for m in plain.modules() if isinstance(m, InvertedResidual))
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
