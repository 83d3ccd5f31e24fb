"""The shared pieces under mmhvit/models/layers and the backbone base."""
import pytest
import torch

from mmhvit.models.backbones import TNT, NesT, PyramidTNT, TransCNN
from mmhvit.models.layers import (
    HMHSA,
    build_rescale,
    multihead_attention,
    trunc_normal_init,
    window_key_mask,
    window_partition,
    window_reverse,
)

pytestmark = pytest.mark.unit


def test_window_partition_round_trip_and_order():
    x = torch.arange(2 * 4 * 6 * 3, dtype=torch.float32).view(2, 4, 6, 3)
    windows = window_partition(x, 2, 3)
    assert windows.shape == (2 * 2 * 2, 6, 3)
    # the second window of the first image is rows 0-1, columns 3-5, row-major
    assert torch.equal(windows[1], x[0, 0:2, 3:6].reshape(6, 3))
    assert torch.equal(window_reverse(windows, 2, 3, 4, 6), x)


def test_masked_attention_equals_attention_without_padded_keys():
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 5, 8) for _ in range(3))
    mask = torch.tensor([[True, True, True, False, False]])  # one group, shared by the batch
    masked = multihead_attention(q, k, v, num_heads=2, key_mask=mask)
    reference = multihead_attention(q, k[:, :3], v[:, :3], num_heads=2)
    torch.testing.assert_close(masked, reference)
    # a group with no real key stays finite (its queries are padding and get discarded)
    empty = multihead_attention(q, k, v, num_heads=2, key_mask=torch.zeros(1, 5, dtype=bool))
    assert torch.isfinite(empty).all()


def test_window_key_mask_marks_padding():
    assert window_key_mask(4, 4, 0, 0, 2, 2, torch.device('cpu')) is None
    mask = window_key_mask(3, 3, 1, 1, 2, 2, torch.device('cpu'))
    assert mask.shape == (4, 4)
    assert mask.sum() == 9 and mask[0].all() and mask[3].tolist() == [True, False, False, False]


@pytest.mark.parametrize('kwargs,message', [
    (dict(mode='global'), "mode must be one of .*'global'"),
    (dict(grid_size=0), 'grid_size must be an integer >= 1, got 0'),
    (dict(ds_ratio=2.0), 'ds_ratio must be an integer >= 1, got 2.0'),
    (dict(num_heads=3), 'num_heads must be >= 1 and divide embed_dims 8, got 3'),
])
def test_hmhsa_checks_its_own_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HMHSA(**{'embed_dims': 8, 'num_heads': 2, **kwargs})


def test_one_weight_init_for_every_family():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Conv2d(16, 256, 3),
                                torch.nn.LayerNorm(256), torch.nn.BatchNorm2d(4))
    for module in model.modules():
        for param in module.parameters(recurse=False):
            torch.nn.init.constant_(param, 3.)
    trunc_normal_init(model, layer_types=(torch.nn.Linear, ))
    linear, conv, layer_norm, batch_norm = model
    assert linear.weight.std().item() == pytest.approx(.02, rel=.1)
    assert not linear.bias.any()
    assert (conv.weight == 3).all()  # not one of layer_types: left as it was
    for norm in (layer_norm, batch_norm):
        assert (norm.weight == 1).all() and not norm.bias.any()


def test_simple_pyramid_rescales():
    maps = [build_rescale(scale, 8, dict(type='LN2d'))(torch.randn(1, 8, 5, 7))
            for scale in (8, 4, 2, 1, 0.5, 0.25)]
    assert [tuple(m.shape[-2:]) for m in maps] == [(40, 56), (20, 28), (10, 14), (5, 7), (3, 4),
                                                   (2, 2)]
    with pytest.raises(ValueError, match='rescale 3'):
        build_rescale(3, 8, dict(type='LN2d'))


@pytest.mark.parametrize('cls', [TransCNN, NesT, TNT, PyramidTNT])
def test_arch_parsing_is_shared_and_strict(cls):
    name = next(iter(cls.arch_zoo))
    assert cls.parse_arch(name.upper()) == {**cls.optional_keys, **cls.arch_zoo[name]}
    settings = cls.parse_arch(name)
    settings[cls.essential_keys[0]] = None  # a fresh copy: the zoo is untouched
    assert cls.arch_zoo[name][cls.essential_keys[0]] is not None
    with pytest.raises(ValueError, match=r"unknown \['embed_dim'\]"):
        cls.parse_arch({**cls.arch_zoo[name], 'embed_dim': 3})
    with pytest.raises(TypeError, match='str or a dict'):
        cls.parse_arch(3)


@pytest.mark.parametrize('kernel', ['auto', 'matmul', 'sdpa'])
@pytest.mark.parametrize('keys', [16, 65])  # auto: the short-sequence path and SDPA
def test_attention_kernels_agree_with_sdpa(keys, kernel):
    torch.manual_seed(0)
    q, k, v = torch.randn(6, 10, 12), torch.randn(6, keys, 12), torch.randn(6, keys, 12)
    mask = torch.rand(3, keys) > 0.3
    out = multihead_attention(q, k, v, num_heads=3, key_mask=mask, scale=0.3, kernel=kernel)
    heads = [t.view(6, -1, 3, 4).transpose(1, 2) for t in (q, k, v)]
    reference = torch.nn.functional.scaled_dot_product_attention(
        *heads, attn_mask=mask.repeat(2, 1)[:, None, None, :], scale=0.3)
    torch.testing.assert_close(out, reference.transpose(1, 2).reshape(6, 10, 12))
    with pytest.raises(ValueError, match='kernel must be one of'):
        multihead_attention(q, k, v, num_heads=3, kernel='flash')


@pytest.mark.parametrize('kernel', ['matmul', 'sdpa'])
@pytest.mark.parametrize('with_mask', [False, True])
def test_attention_bias_is_added_to_the_logits(kernel, with_mask):
    torch.manual_seed(0)
    q, k, v = torch.randn(6, 10, 12), torch.randn(6, 70, 12), torch.randn(6, 70, 12)
    bias = torch.randn(1, 3, 10, 70)  # broadcast over the batch, as PyramidTNT's relative_pos
    mask = torch.rand(3, 70) > 0.3 if with_mask else None
    out = multihead_attention(q, k, v, num_heads=3, key_mask=mask, attn_bias=bias,
                              kernel=kernel)
    heads = [t.view(6, -1, 3, 4).transpose(1, 2) for t in (q, k, v)]
    float_mask = bias if mask is None else torch.where(mask.repeat(2, 1)[:, None, None, :], bias,
                                                       float('-inf'))
    reference = torch.nn.functional.scaled_dot_product_attention(*heads, attn_mask=float_mask)
    torch.testing.assert_close(out, reference.transpose(1, 2).reshape(6, 10, 12))


def test_auto_kernel_takes_matmul_where_cpu_sdpa_falls_back_to_its_math_path():
    from torch.profiler import ProfilerActivity, profile

    from mmhvit.models.layers.attention import auto_kernel
    q, k = torch.randn(1, 3, 10, 4), torch.randn(1, 3, 70, 4)
    learned = torch.randn(1, 3, 10, 70, requires_grad=True)
    assert auto_kernel(q, k[:, :, :64], None) == 'matmul'  # short sequences
    assert auto_kernel(q, k, None) == auto_kernel(q, k, learned.detach()) == 'sdpa'
    assert auto_kernel(q, k, learned) == 'matmul'
    with torch.no_grad():
        assert auto_kernel(q, k, learned) == 'sdpa'  # inference: the fused kernel takes the bias

    def sdpa_ops(bias):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=bias)
        return {e.key for e in prof.key_averages()}

    # Why: PyTorch's CPU SDPA runs a bias that takes gradients through its math path, with an
    # extra all -inf row check; should a PyTorch release fuse it, 'auto' should take SDPA again.
    assert 'aten::_scaled_dot_product_flash_attention_for_cpu' in sdpa_ops(learned.detach())
    assert {'aten::_scaled_dot_product_attention_math', 'aten::isneginf'} <= sdpa_ops(learned)


def test_flop_count_separates_attention_products():
    from mmhvit.utils import count_flops

    class Attend(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.attn_kernel = 'auto'

        def forward(self, x):  # 16 keys: the CPU would take the short-sequence matmul path
            return multihead_attention(x, x, x, num_heads=2, kernel=self.attn_kernel)

    x, model = torch.randn(3, 16, 8), Attend()
    assert count_flops(model, (x, ), with_attention=False) == 0
    assert count_flops(model, (x, ), with_attention=True) == 3 * 2 * 16 * 16 * (4 + 4)
    assert model.attn_kernel == 'auto'  # set for the count only


@pytest.mark.parametrize('size_in,size_out', [((14, 14), (50, 84)), ((14, 14), (7, 9)),
                                              ((8, 8), (8, 8)), ((3, 5), (1, 1)),
                                              ((6, 4), (13, 2))])
def test_bicubic_matrices_equal_interpolate(size_in, size_out):
    """The exported form of the position-embedding resize is PyTorch's bicubic resize."""
    from mmhvit.models.layers.pos_embed import bicubic_matrix
    pos = torch.randn(1, 5, *size_in, dtype=torch.float64)
    rows, cols = (bicubic_matrix(n_in, n_out, pos.dtype, pos.device)
                  for n_in, n_out in zip(size_in, size_out))
    expected = torch.nn.functional.interpolate(pos, size=size_out, mode='bicubic',
                                               align_corners=False)
    torch.testing.assert_close(rows @ pos @ cols.T, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('size_out', [(50, 84), (7, 9), (14, 14)])
def test_resize_pos_map_is_bicubic_interpolate_with_its_gradient(size_out):
    """The eager resize (matrices, for speed) gives PyTorch's bicubic values and gradients."""
    from mmhvit.models.layers.pos_embed import resize_pos_map
    pos = torch.randn(1, 5, 14, 14, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(1, 5, *size_out, dtype=torch.float64)
    ours = resize_pos_map(pos, size_out)
    (grad, ) = torch.autograd.grad((ours * weight).sum(), pos)
    expected = torch.nn.functional.interpolate(pos, size=size_out, mode='bicubic',
                                               align_corners=False)
    (expected_grad, ) = torch.autograd.grad((expected * weight).sum(), pos)
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)
    assert (ours is pos) == (size_out == (14, 14))


def test_resize_pos_map_in_bfloat16_errs_no_more_than_pytorchs_kernel():
    """bfloat16 cannot hold the source positions of a 168-wide grid; the matrices are built in
    float32, so the resize errs like PyTorch's own bfloat16 bicubic kernel, not more."""
    from mmhvit.models.layers.pos_embed import resize_pos_map
    pos = torch.randn(1, 8, 14, 14)
    exact = torch.nn.functional.interpolate(pos, size=(100, 168), mode='bicubic',
                                            align_corners=False)
    ours = resize_pos_map(pos.bfloat16(), (100, 168))
    assert ours.dtype == torch.bfloat16
    theirs = torch.nn.functional.interpolate(pos.bfloat16(), size=(100, 168), mode='bicubic',
                                             align_corners=False)
    our_error = (ours.float() - exact).abs().max()
    assert our_error < 0.05 * exact.abs().max()
    assert our_error < 2 * (theirs.float() - exact).abs().max()
