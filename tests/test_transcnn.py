"""TransCNN: official-exact numbers, padding, the iterative H-MHSA, checkpoints (the contract
shared by all backbones is in test_backbone_contract.py).

The reference is the official ``TransCNN.py`` (yun-liu/HAT-Net @0bd7463) restated in plain torch
(:mod:`mmhvit.testing.hmhsa_reference`): exactly its computation on inputs it accepts (multiples of
128), and for other sizes the computation in which padded keys are absent.
"""
import math
import os.path as osp

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import REPO, official_keys, run_tool, tool_env

from mmhvit.models.backbones import TransCNN
from mmhvit.models.converters import convert_transcnn_checkpoint
from mmhvit.models.layers import HMHSA, grid_attention, multihead_attention, pool_cells
from mmhvit.models.layers import hmhsa as hmhsa_module
from mmhvit.testing import assert_close, meta_state_dict, random_state_dict, tiny_arch
from mmhvit.testing import transcnn_forward as reference_forward
from mmhvit.testing import transcnn_shapes as official_shapes
from mmhvit.testing.hmhsa_reference import r_attention, r_cell_pool, r_window_attention

pytestmark = pytest.mark.unit
TINY = tiny_arch('TransCNN')
OFFICIAL_PARAMS_M = dict(tiny=13.316, small=26.539, medium=48.323, large=80.033)


def converted_model(arch, sd, dtype=torch.float64, **kwargs):
    model = TransCNN(arch, **kwargs).to(dtype).eval()
    missing, unexpected = model.load_state_dict(convert_transcnn_checkpoint(sd), strict=False)
    assert not missing and not unexpected
    return model


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# --- architecture and official weights -----------------------------------------------------------
@pytest.mark.parametrize('name', ['tiny', 'small', 'medium', 'large'])
def test_official_layout_and_param_counts(name):
    arch = TransCNN.arch_zoo[name]
    official = official_keys('transcnn', name)
    # The generator used for custom archs reproduces the official state dict of every variant.
    assert official_shapes(arch) == official
    params = sum(math.prod(s) for k, s in official.items()
                 if not k.endswith(('running_mean', 'running_var', 'num_batches_tracked')))
    with torch.device('meta'):
        model = TransCNN(name)
    ours = sum(p.numel() for p in model.parameters()) + arch['embed_dims'][-1] * 1000 + 1000
    assert ours == params
    assert round(ours / 1e6, 3) == OFFICIAL_PARAMS_M[name]
    # Converter round trip: every official key lands on one of ours, with the same size.
    converted = convert_transcnn_checkpoint(
        {k: torch.empty(s, device='meta') for k, s in official.items()})
    own = model.state_dict()
    assert set(converted) == set(own)
    assert all(converted[k].shape == own[k].shape for k in own)
    # Our own keys pass through unchanged.
    assert convert_transcnn_checkpoint(own) is own


def test_base_is_small():
    assert TransCNN.arch_zoo['base'] == TransCNN.arch_zoo['small']


@pytest.mark.parametrize('arch,size', [(TINY, (128, 256)), ('tiny', (128, 128))])
def test_matches_official_on_official_sizes(arch, size, monkeypatch):
    """Inputs divisible by 128: no padding or masking happens and the numbers are official."""
    arch_dict = TransCNN.arch_zoo[arch] if isinstance(arch, str) else arch
    sd = random_state_dict(official_shapes(arch_dict))
    model = converted_model(arch, sd)
    masks = []
    real_attention = hmhsa_module.multihead_attention

    def spy(*args, key_mask=None, **kwargs):
        masks.append(key_mask)
        return real_attention(*args, key_mask=key_mask, **kwargs)

    monkeypatch.setattr(hmhsa_module, 'multihead_attention', spy)
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    with torch.no_grad():
        ours = model(x)
        expected, _ = reference_forward(sd, x, arch_dict)
    assert masks and all(mask is None for mask in masks)
    for out, ref in zip(ours, expected):
        assert_close(out, ref, 1e-10)


@pytest.mark.parametrize('size', [(97, 131), (200, 333), (33, 40)])
def test_padding_never_leaks(size):
    """Maps that need padding: valid outputs equal the computation without the padded keys."""
    sd = random_state_dict(official_shapes(TINY), seed=1)
    model = converted_model(TINY, sd)
    x = torch.randn(1, 3, *size, dtype=torch.float64)
    with torch.no_grad():
        ours = model(x)
        expected, _ = reference_forward(sd, x, TINY)
    for out, ref in zip(ours, expected):
        assert_close(out, ref, 1e-10)


def test_window_attention_and_pooling_ignore_padding():
    qkv = torch.randn(2, 13, 11, 3 * 8, dtype=torch.float64)
    ours = grid_attention(qkv, 8, lambda q, k, v, key_mask: multihead_attention(
        q, k, v, 2, key_mask=key_mask))
    ref = r_window_attention(qkv.permute(0, 3, 1, 2), 8, 2).permute(0, 2, 3, 1)
    assert_close(ours, ref, 1e-12)
    x = torch.randn(2, 4, 13, 11, dtype=torch.float64)
    for cell in (2, 4, 8, 16):
        assert_close(pool_cells(x, cell, 'avg'), r_cell_pool(x, cell, 'mean'), 1e-12)
        assert_close(pool_cells(x, cell, 'max'), r_cell_pool(x, cell, 'amax'), 1e-12)
    # Divisible maps: exactly the official nn.AvgPool2d.
    x = torch.randn(1, 4, 16, 24)
    assert torch.equal(pool_cells(x, 8, 'avg'), nn.AvgPool2d(8, 8)(x))


def test_init_cfg_loads_official_checkpoint(tmp_path):
    sd = random_state_dict(official_shapes(TINY), seed=2, dtype=torch.float32)
    path = tmp_path / 'official.pth'
    torch.save({'model': sd}, path)
    model = TransCNN(TINY, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    model.eval()
    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        ours = model(x)
        expected, _ = reference_forward(sd, x, TINY)
    for out, ref in zip(ours, expected):
        assert_close(out, ref, 1e-4)


def test_checkpoint_of_another_arch_names_both():
    with torch.device('meta'):
        model = TransCNN('small')
    official = meta_state_dict(official_keys('transcnn', 'tiny'))
    with pytest.raises(ValueError, match=r"arch tiny, but this model is arch small"):
        model.load_converted(model.convert_checkpoint(official))


# --- the iterative mode at any size ------------------------------------------------------------
@pytest.mark.parametrize('size', [(200, 333), (97, 131), (1, 1)])
def test_iterative_output_shapes(size):
    model = TransCNN(TINY, attn_mode='iterative').eval()
    model.init_weights()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    for out, dim, stride in zip(outs, TINY['embed_dims'], (4, 8, 16, 32)):
        assert out.shape == (1, dim, math.ceil(size[0] / stride), math.ceil(size[1] / stride))
        assert torch.isfinite(out).all()


# --- the paper's iterative H-MHSA -----------------------------------------------------------------
def reference_iterative(module, x):
    """The seed's steps, by slicing: windows, max+avg merge, nearest upsample, sum, project."""
    tokens = module.norm(x)
    height, width = x.shape[-2:]
    grid, scale, total = module.grid_size, 1, 0
    while True:
        qkv = F.linear(tokens.permute(0, 2, 3, 1), module.qkv.weight,
                       module.qkv.bias).permute(0, 3, 1, 2)
        step = r_window_attention(qkv, grid, module.num_heads) + tokens
        rows = torch.arange(height) // scale
        cols = torch.arange(width) // scale
        total = total + step[:, :, rows][:, :, :, cols]
        if step.shape[-2] <= grid and step.shape[-1] <= grid:
            break
        tokens = r_cell_pool(step, grid, 'amax') + r_cell_pool(step, grid, 'mean')
        scale *= grid
    return F.linear(total.permute(0, 2, 3, 1), module.proj.weight,
                    module.proj.bias).permute(0, 3, 1, 2)


def make_iterative(grid, dim=8, heads=2):
    torch.manual_seed(0)
    module = HMHSA(dim, heads, grid_size=grid, mode='iterative').double().eval()
    with torch.no_grad():
        module.norm.running_mean.uniform_(-.3, .3)
        module.norm.running_var.uniform_(.5, 2.)
    return module


@pytest.mark.parametrize('size', [(6, 7), (8, 8)])
def test_iterative_single_grid_is_global_attention(size):
    module = make_iterative(grid=8)
    x = torch.randn(2, 8, *size, dtype=torch.float64)
    with torch.no_grad():
        tokens = module.norm(x)
        qkv = F.linear(tokens.flatten(2).transpose(1, 2), module.qkv.weight, module.qkv.bias)
        attended = r_attention(*qkv.transpose(1, 2).chunk(3, dim=1), 2).reshape(x.shape)
        expected = F.linear((attended + tokens).flatten(2).transpose(1, 2), module.proj.weight,
                            module.proj.bias).transpose(1, 2).reshape(x.shape)
        assert_close(module(x), expected, 1e-12)


@pytest.mark.parametrize('size', [(20, 27), (64, 9), (16, 16)])
def test_iterative_matches_the_paper_steps(size):
    module = make_iterative(grid=4)
    x = torch.randn(2, 8, *size, dtype=torch.float64)
    with torch.no_grad():
        assert_close(module(x), reference_iterative(module, x), 1e-12)


def test_iterative_gradients_flow():
    model = TransCNN(TINY, attn_mode='iterative')
    model.init_weights()
    assert not hasattr(model.stages[0].blocks[0].attn, 'kv')
    outs = model(torch.randn(2, 3, 70, 90))
    sum(out.square().mean() for out in outs).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


# --- family specifics -----------------------------------------------------------------------
def test_official_init():
    model = TransCNN(dict(TINY, embed_dims=[64, 128, 128, 128]))
    model.init_weights()
    qkv = model.stages[0].blocks[0].attn.qkv
    assert qkv.weight.std().item() == pytest.approx(.02, rel=.1)
    assert not qkv.bias.any()
    assert TransCNN(TINY, qkv_bias=False).stages[0].blocks[0].attn.q.bias is None


# --- errors ---------------------------------------------------------------------------------------
def test_config_errors():
    with pytest.raises(ValueError, match=r"TransCNN: unknown arch 'huge'.*'base'.*'tiny'"):
        TransCNN('huge')
    with pytest.raises(ValueError, match=r"missing \['ds_ratios'\]"):
        TransCNN({k: v for k, v in TINY.items() if k != 'ds_ratios'})
    with pytest.raises(ValueError, match='divisible by num_heads'):
        TransCNN(dict(TINY, num_heads=[3, 2, 2, 4]))
    with pytest.raises(ValueError, match='needs 4 values'):
        TransCNN(dict(TINY, grid_sizes=[8, 8, 1]))
    with pytest.raises(ValueError, match="H-MHSA mode must be one of .*'global'"):
        TransCNN(TINY, attn_mode='global')


# --- MMPretrain classifier from the converted official checkpoint ---------------------------------
@pytest.mark.slow
def test_converted_classifier_reproduces_official_logits(tmp_path):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint
    from mmpretrain.registry import MODELS

    arch = TransCNN.arch_zoo['base']
    sd = random_state_dict(official_shapes(arch), seed=3, dtype=torch.float32)
    src, dst = tmp_path / 'TransCNN-Small.pth', tmp_path / 'converted.pth'
    torch.save({'model': sd}, src)
    run_tool('tools/model_converters/transcnn2mmhvit.py', str(src), str(dst), env=tool_env())

    cfg = Config.fromfile(osp.join(REPO, 'configs', 'transcnn_b_in1k.py'))
    init_default_scope('mmpretrain')
    classifier = MODELS.build(cfg.model)
    checkpoint = load_checkpoint(classifier, str(dst), map_location='cpu', strict=True)
    assert checkpoint['meta']['arch'] == 'small'
    classifier.eval()
    x = torch.randn(2, 3, 128, 128)
    with torch.no_grad():
        logits = classifier(x, mode='tensor')
        _, expected = reference_forward(
            {k: v.double() if v.is_floating_point() else v for k, v in sd.items()}, x.double(),
            arch)
    assert_close(logits, expected.float(), 1e-5)
