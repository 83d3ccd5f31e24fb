"""PyramidTNT: official-exact numbers, any size, the relative_pos resize, checkpoints (the contract
shared by all backbones is in test_backbone_contract.py). The reference is the restated official
computation of :mod:`mmhvit.testing.ptnt_reference`.
"""
import math
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, official_keys

from mmhvit.models.backbones import TNT, PyramidTNT
from mmhvit.models.converters import convert_ptnt_checkpoint, describe_ptnt_checkpoint
from mmhvit.models.converters.files import convert_file
from mmhvit.models.layers import AttnBiasRows, resize_attn_bias
from mmhvit.testing import assert_close, meta_state_dict, tiny_arch
from mmhvit.testing import ptnt_bias as r_bias
from mmhvit.testing import ptnt_forward as reference_forward
from mmhvit.testing import ptnt_shapes as official_shapes
from mmhvit.testing import random_ptnt_state_dict as random_state_dict
from mmhvit.utils import count_flops

pytestmark = pytest.mark.unit
ARCHS = ('tiny', 'small', 'medium', 'base')
SIZES = dict(tiny=192, small=256, medium=256, base=256)
# The published figures (paper, tnt_pytorch/readme.md) and the official modules' exact counts
# (1000-class head); the paper rounds medium's 84.94M to 85.0.
PAPER = dict(tiny=(10.6, 0.6), small=(32.0, 3.3), medium=(85.0, 8.2), base=(157.0, 16.0))
OFFICIAL_PARAMS = dict(tiny=10578529, small=31953200, medium=84943572, base=156990072)
# The tiny arch with depth 7 in stage 2: a second block with words there, as the official rule.
TINY = tiny_arch('PyramidTNT', depths=[1, 7, 1, 1])


def converted_model(arch, sd, img_size, **kwargs):
    kwargs = dict(dict(out_type='raw', drop_path_rate=0.), **kwargs)
    model = PyramidTNT(arch, pretrain_img_size=img_size, **kwargs).double().eval()
    converted = convert_ptnt_checkpoint(sd)
    assert not any(k.startswith('head.') for k in converted)
    missing, unexpected = model.load_state_dict(converted, strict=False)
    assert not missing and not unexpected
    return model


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# --- architecture and official weights -----------------------------------------------------------
@pytest.mark.parametrize('name', ARCHS)
def test_official_layout_and_param_counts(name):
    arch = PyramidTNT.arch_zoo[name]
    official = official_keys('ptnt', name)
    # The generator used for custom archs reproduces the official modules' state dicts.
    assert official_shapes(arch, SIZES[name]) == official
    params = sum(math.prod(s) for k, s in official.items()
                 if not k.endswith(('running_mean', 'running_var', 'num_batches_tracked')))
    assert params == OFFICIAL_PARAMS[name]
    assert abs(params / 1e6 - PAPER[name][0]) < .06  # the paper's one-decimal figure
    with torch.device('meta'):
        model = PyramidTNT(name, out_type='raw', out_indices=(3, ))
    assert model.pos_grid == (SIZES[name] // 8, ) * 2
    assert sum(p.numel() for p in model.parameters()) + 1000 * arch['embed_dims'][3] + 1000 == \
        params
    # Converter: every official key lands on one of ours, with the same size.
    converted = convert_ptnt_checkpoint(meta_state_dict(official), with_head=True)
    own = model.state_dict()
    assert set(converted) - set(own) == {'head.fc.weight', 'head.fc.bias'}
    assert set(own) <= set(converted)
    assert all(converted[k].shape == own[k].shape for k in own)
    assert convert_ptnt_checkpoint(own) is own  # our own keys pass through
    assert describe_ptnt_checkpoint(converted, PyramidTNT) == name


@pytest.mark.slow
@pytest.mark.parametrize('name', ARCHS)
def test_gmacs_equal_the_papers(name):
    """Multiply-adds of the classifier at its size, attention products included (the papers'
    way: without them tiny/small count 0.57/3.18)."""
    size = SIZES[name]
    model = PyramidTNT(name, out_type='raw', out_indices=(3, )).eval()
    with torch.no_grad():
        macs = count_flops(model, (torch.zeros(1, 3, size, size), ), with_attention=True)
    macs += model.stage_channels[-1] * 1000  # the head
    assert round(macs / 1e9, 1) == PAPER[name][1]


@pytest.mark.parametrize('name', ['tiny', 'small'])
def test_matches_official_at_pretraining_size(name):
    """The real archs (small: a stage of 8 blocks, two with words) at their own size: every stage
    map and the logits equal the official computation, and no bias or embedding is resized."""
    arch, size = PyramidTNT.arch_zoo[name], SIZES[name]
    sd = random_state_dict(official_shapes(arch, size), seed=1)
    model = converted_model(name, sd, size)
    assert all(stage.attn_bias(stage.pos_grid) is stage.relative_pos for stage in model.stages)
    x = torch.randn(1, 3, size, size, dtype=torch.float64)
    with torch.no_grad():
        maps = model(x)
        expected, logits = reference_forward(sd, x, arch)
    for out, ref in zip(maps, expected):
        assert_close(out, ref, 1e-10)
    assert logits.std() > .1  # the logits carry signal
    ours = F.linear(maps[-1].mean((2, 3)), sd['head.weight'], sd['head.bias'])
    assert_close(ours, logits, 1e-10)


@pytest.mark.parametrize('size', [(97, 131), (200, 72), (33, 40), (1, 1)])
def test_any_size_equals_the_restated_computation(size):
    """Odd grids (word merges pad), partial pooled cells, resized embeddings and biases."""
    sd = random_state_dict(official_shapes(TINY, 64), seed=2)
    model = converted_model(TINY, sd, 64)
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    with torch.no_grad():
        maps = model(x)
        expected, _ = reference_forward(sd, x, TINY)
    for out, ref, stride in zip(maps, expected, (8, 16, 32, 64)):
        assert out.shape[-2:] == (math.ceil(size[0] / stride), math.ceil(size[1] / stride))
        assert_close(out, ref, 1e-10)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['tiny', 'small'])
def test_converted_classifier_reproduces_official_logits(name, tmp_path):
    """The converter tool's file in configs/ptnt_s_in1k.py (float32) gives the official logits
    within 1e-5 relative at the pre-training size."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint
    from mmpretrain.registry import MODELS

    arch, size = PyramidTNT.arch_zoo[name], SIZES[name]
    sd = random_state_dict(official_shapes(arch, size), seed=3, dtype=torch.float32)
    src, dst = tmp_path / f'ptnt_{name}.pth.tar', tmp_path / 'converted.pth'
    torch.save(sd, src)
    convert_file('ptnt', str(src), str(dst), arch=name)
    cfg = Config.fromfile(osp.join(REPO, 'configs', 'ptnt_s_in1k.py'))
    cfg.model.backbone.arch, cfg.model.head.in_channels = name, arch['embed_dims'][3]
    init_default_scope('mmpretrain')
    classifier = MODELS.build(cfg.model)
    assert load_checkpoint(classifier, str(dst), map_location='cpu', strict=True)['meta'][
        'arch'] == name
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        logits = classifier.eval()(x, mode='tensor')
        _, expected = reference_forward({k: v.double() for k, v in sd.items()}, x.double(), arch)
    assert_close(logits, expected.float(), 1e-5)


# --- relative_pos at other sizes -----------------------------------------------------------------
def smooth_bias(grid, key_grid, heads=2):
    """A bias that is a smooth function of where query and key lie in the image (cell centres in
    [0, 1]), sampled on the grids."""
    def centres(n):
        return (torch.arange(n, dtype=torch.float64) + .5) / n

    qy, qx = torch.meshgrid(centres(grid[0]), centres(grid[1]), indexing='ij')
    ky, kx = torch.meshgrid(centres(key_grid[0]), centres(key_grid[1]), indexing='ij')
    dist = (qy.reshape(-1, 1) - ky.reshape(1, -1))**2 + (qx.reshape(-1, 1) - kx.reshape(1, -1))**2
    return torch.stack([torch.cos(2 * dist) + qy.reshape(-1, 1) * (h + 1)
                        for h in range(heads)])[None]


@pytest.mark.slow
def test_relative_pos_resize_is_exact_at_its_size_and_smooth_elsewhere():
    bias = smooth_bias((32, 32), (8, 8))
    span = (bias.max() - bias.min()).item()
    assert resize_attn_bias(bias, (32, 32), (8, 8), (32, 32), (8, 8)) is bias
    for grid, key_grid in [((48, 40), (12, 10)), ((20, 27), (5, 7)), ((100, 168), (25, 42))]:
        resized = resize_attn_bias(bias, (32, 32), (8, 8), grid, key_grid)
        expected = smooth_bias(grid, key_grid)
        assert resized.shape == expected.shape
        # Smooth: the resized table is the same function at the new places, up to the bicubic
        # error (largest at the border, where 8 x 8 keys' values are extrapolated).
        error = (resized - expected).abs()
        assert error.mean() < 5e-3 * span and error.max() < 6e-2 * span
        # The 4-D interpolation, both orders: ours queries first, the reference keys first.
        torch.testing.assert_close(resized, r_bias(bias, grid, key_grid), rtol=0, atol=1e-12)
    constant = torch.full((1, 2, 64, 16), 0.7, dtype=torch.float64)
    resized = resize_attn_bias(constant, (8, 8), (4, 4), (13, 9), (4, 3))
    torch.testing.assert_close(resized, torch.full_like(resized, 0.7))


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_bias_rows_equal_the_whole_bias(dtype):
    bias = torch.randn(1, 3, 64, 16, dtype=dtype)
    whole = resize_attn_bias(bias, (8, 8), (4, 4), (13, 9), (4, 3))
    chunks = list(AttnBiasRows(bias, (8, 8), (4, 4), (13, 9), (4, 3), max_queries=20))
    assert [(start, end) for start, end, _ in chunks] == [(i, min(i + 18, 117))
                                                          for i in range(0, 117, 18)]
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(torch.cat([c for *_, c in chunks], 2), whole, rtol=0, atol=tol)


def test_bias_chunk_size_same_outputs_and_gradients():
    """The bounded-memory option: the same logits at the pre-training size and at another, the
    same gradients (relative_pos included)."""
    sd = random_state_dict(official_shapes(TINY, 64), seed=4)
    plain = converted_model(TINY, sd, 64).train()
    chunked = converted_model(TINY, sd, 64, bias_chunk_size=16).train()
    for size in ((64, 64), (75, 90)):
        x = torch.randn(2, 3, *size, dtype=torch.float64)
        grads = []
        for model in (plain, chunked):
            model.zero_grad()
            outs = model(x)
            sum(o.square().mean() for o in outs).backward()
            grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
            grads[-1]['outs'] = torch.cat([o.flatten() for o in outs])
        for key, value in grads[0].items():
            assert_close(grads[1][key], value, 1e-10)


# --- checkpoints ---------------------------------------------------------------------------------
def test_checkpoint_at_other_size_resizes_pos_embed_and_relative_pos(tmp_path):
    src = PyramidTNT(TINY, pretrain_img_size=64, drop_path_rate=0.)  # 8 x 8 sentences
    src.init_weights()
    path = tmp_path / 'at64.pth'
    torch.save(src.state_dict(), path)
    model = PyramidTNT(TINY, pretrain_img_size=(96, 128), drop_path_rate=0.,
                       init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    assert model.stages[0].relative_pos.shape == (1, 1, 12 * 16, 3 * 4)
    torch.testing.assert_close(model.stages[1].relative_pos, resize_attn_bias(
        src.stages[1].relative_pos, (4, 4), (2, 2), (6, 8), (3, 4)).detach())
    # Resizing in forward to the real grid gives what loading at that size gives.
    src.eval(), model.eval()
    x = torch.randn(1, 3, 96, 128)
    with torch.no_grad():
        for a, b in zip(src(x), model(x)):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize('container', ['plain', 'state_dict'])
def test_init_cfg_loads_an_official_pth_tar(container, tmp_path):
    sd = random_state_dict(official_shapes(TINY, 64), seed=5, dtype=torch.float32)
    path = tmp_path / 'ptnt_official.pth.tar'
    torch.save(sd if container == 'plain' else {'state_dict': sd, 'epoch': 3}, path)
    model = PyramidTNT(TINY, pretrain_img_size=64, out_type='raw', drop_path_rate=0.,
                       init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    x = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        ours = model.eval()(x)
        expected, _ = reference_forward({k: v.double() for k, v in sd.items()}, x.double(), TINY)
    for out, ref in zip(ours, expected):
        assert_close(out, ref.float(), 1e-4)


def test_other_families_and_archs_are_refused(tmp_path):
    model = PyramidTNT(TINY, pretrain_img_size=64)
    tnt = TNT(tiny_arch('TNT')).state_dict()
    official_tnt = {'outer_pos': torch.zeros(1, 197, 16), 'patch_embed.proj.weight':
                    torch.zeros(4, 3, 7, 7), 'blocks.0.outer_norm1.weight': torch.zeros(16)}
    for sd in (tnt, official_tnt):
        with pytest.raises(ValueError, match='a TNT checkpoint.*not a PyramidTNT one.*mmhvit.TNT'):
            model.convert_checkpoint(sd)
    with pytest.raises(ValueError, match='not a PyramidTNT checkpoint'):
        model.convert_checkpoint({'levels.0.pos_embed': torch.zeros(1, 16, 4, 8)})
    with torch.device('meta'):
        tiny = PyramidTNT('tiny')
    small = meta_state_dict(official_keys('ptnt', 'small'))
    with pytest.raises(ValueError, match=r'arch small, but this model is arch tiny'):
        tiny.load_converted(tiny.convert_checkpoint(small))
    # The converter tool: one error, no file written.
    torch.save(tnt, tmp_path / 'tnt.pth')
    path = tmp_path / 'ptnt_s.pth.tar'
    torch.save(random_state_dict(official_shapes(TINY, 64), dtype=torch.float32), path)
    with pytest.raises(ValueError, match='a TNT checkpoint.*mmhvit convert tnt'):
        convert_file('ptnt', str(tmp_path / 'tnt.pth'), str(tmp_path / 'x.pth'))
    with pytest.raises(ValueError, match=r'a PyramidTNT custom \(embed_dims=\[16.*not small'):
        convert_file('ptnt', str(path), str(tmp_path / 'x.pth'), arch='s')
    assert not (tmp_path / 'x.pth').exists()


# --- family specifics ----------------------------------------------------------------------------
def test_stage_layout_and_official_init():
    model = PyramidTNT('small', out_indices=(1, 3))
    model.init_weights()
    assert [[b.inner is not None for b in s.blocks] for s in model.stages] == [
        [True, False], [True, True] + [False] * 6, [True, False, False, False], [True, False]]
    assert [s.out_proj is not None for s in model.stages] == [False, True, False, True]
    assert [s.norm is not None for s in model.stages] == [False, False, False, True]
    assert model.out_channels == (256, 512)
    assert model.stages[0].relative_pos.std().item() == pytest.approx(1, rel=.02)
    assert model.patch_embed.pos_embed.std().item() == pytest.approx(.02, rel=.1)
    conv = model.patch_embed.outer_convs[6]
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / (9 * 128)), rel=.05)


def test_pyramid_is_the_upsampled_raw_map():
    torch.manual_seed(0)
    pyramid = PyramidTNT(TINY, pretrain_img_size=64).eval()
    raw = PyramidTNT(TINY, pretrain_img_size=64, out_type='raw').eval()
    raw.load_state_dict(pyramid.state_dict(), strict=False)
    x = torch.randn(1, 3, 70, 45)
    with torch.no_grad():
        for stage, up, fmap, stride in zip(pyramid.stages, pyramid(x), raw(x), (4, 8, 16, 32)):
            assert up.shape[-2:] == (math.ceil(70 / stride), math.ceil(45 / stride))
            # (stride 8: 5 x 3 sentences give 10 x 6, cropped to 9 x 6)
            torch.testing.assert_close(up, stage.out_proj(fmap)[..., :up.shape[2], :up.shape[3]])


def test_config_errors():
    with pytest.raises(ValueError, match=r"unknown arch 'huge'.*'base'.*'medium'"):
        PyramidTNT('huge')
    with pytest.raises(ValueError, match=r"missing \['inner_num_heads'\]"):
        PyramidTNT({k: v for k, v in TINY.items() if k != 'inner_num_heads'})
    with pytest.raises(ValueError, match='embed_dims .* not divisible by num_heads'):
        PyramidTNT(dict(TINY, num_heads=[3, 2, 4, 4]))
    with pytest.raises(ValueError, match='depths needs 4 positive ints'):
        PyramidTNT(dict(TINY, depths=[1, 0, 1, 1]))
    with pytest.raises(ValueError, match='sr_ratios needs 4 positive ints'):
        PyramidTNT(dict(TINY, sr_ratios=[4, 2, 1]))
    with pytest.raises(ValueError, match='out_type must be one of'):
        PyramidTNT(TINY, out_type='tokens')
    with pytest.raises(ValueError, match='bias_chunk_size must be a positive int'):
        PyramidTNT(TINY, bias_chunk_size=0)
    with pytest.raises(ValueError, match='pretrain_img_size must be'):
        PyramidTNT(TINY, pretrain_img_size=(0, 64))
    assert PyramidTNT('S').arch_name == 'small' and PyramidTNT('ti').pos_grid == (24, 24)


def test_bias_rows_table_gradient_equals_autograd():
    """The backward's own gradient of a chunk of bias rows to the table: autograd's through the
    same products, for every chunk (the last one shorter)."""
    torch.manual_seed(0)
    bias = torch.randn(1, 3, 64, 16, dtype=torch.float64, requires_grad=True)
    rows = AttnBiasRows(bias, (8, 8), (4, 4), (13, 9), (4, 3), max_queries=20)
    for start, end, chunk in rows:
        grad = torch.randn_like(chunk)
        expected = torch.autograd.grad(chunk, bias, grad)[0]
        torch.testing.assert_close(rows.table_grad(start, end, grad).reshape(bias.shape),
                                   expected, rtol=0, atol=1e-12)
