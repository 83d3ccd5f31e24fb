"""HAT-Net: official-exact numbers, padding, release detection, checkpoints (the contract shared by
all backbones is in test_backbone_contract.py).

The reference is the official ``HAT_Net.py`` (yun-liu/HAT-Net) restated in plain float64 torch
(:mod:`mmhvit.testing.hmhsa_reference`): GroupNorm (1 group, eps 1e-6) over the whole map, windows
and pooled cells as the official code cuts them where they are whole and by slicing at borders. At
224 x 224 (the official size: every window and pooled cell is whole) this is exactly the official
computation; at other sizes it is the computation in which no padded value exists at all.
"""
import math
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, official_keys, run_tool, tool_env

from mmhvit.models.backbones import HATNet, TransCNN
from mmhvit.models.converters import (
    convert_hatnet_checkpoint,
    convert_transcnn_checkpoint,
    describe_hmhsa_checkpoint,
    hmhsa_release,
)
from mmhvit.models.converters.files import convert_file
from mmhvit.models.layers import hmhsa as hmhsa_module
from mmhvit.testing import assert_close, meta_state_dict, random_state_dict, tiny_arch
from mmhvit.testing import hatnet_forward as reference_forward
from mmhvit.testing import hatnet_shapes as official_shapes

pytestmark = pytest.mark.unit
# The published parameter counts (HAT-Net README, 1000-class head, unused proj_norm included).
OFFICIAL_PARAMS_M = dict(tiny=12.66, small=25.75, medium=42.94, large=63.13)
# Official constructor arguments (HAT_Net_tiny/small/medium/large), as the official file has them.
OFFICIAL_ARGS = {
    'tiny': dict(dims=[48, 96, 240, 384], head_dim=48, depths=[2, 2, 6, 3], kernels=[3, 3, 3, 3]),
    'small': dict(dims=[64, 128, 320, 512], head_dim=64, depths=[2, 3, 8, 3],
                  kernels=[3, 3, 3, 3]),
    'medium': dict(dims=[64, 128, 320, 512], head_dim=64, depths=[3, 6, 18, 3],
                   kernels=[5, 3, 5, 3]),
    'large': dict(dims=[64, 128, 320, 640], head_dim=64, depths=[3, 8, 27, 3],
                  kernels=[3, 3, 3, 3]),
}
EXPANSIONS, GRIDS, RATIOS = [8, 8, 4, 4], [8, 7, 7, 1], [8, 4, 2, 1]
# Partial windows and pooled cells at most sizes.
TINY = tiny_arch('HATNet')


def our_arch(official):
    """Our arch dict for official constructor arguments (heads = dim // head_dim)."""
    o = dict(dict(expansions=EXPANSIONS, grids=GRIDS, ratios=RATIOS), **official)
    return dict(embed_dims=o['dims'], depths=o['depths'],
                num_heads=[d // o['head_dim'] for d in o['dims']], mlp_ratio=o['expansions'],
                grid_sizes=o['grids'], ds_ratios=o['ratios'], kernel_sizes=o['kernels'])


def converted_model(arch, sd, **kwargs):
    model = HATNet(arch, **kwargs).double().eval()
    missing, unexpected = model.load_state_dict(convert_hatnet_checkpoint(sd), strict=False)
    assert not missing and not unexpected
    return model


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# --- architecture and official weights -----------------------------------------------------------
@pytest.mark.parametrize('name', ['tiny', 'small', 'medium', 'large'])
def test_official_layout_and_param_counts(name):
    official = official_shapes(our_arch(OFFICIAL_ARGS[name]))
    params = sum(math.prod(s) for s in official.values())
    assert round(params / 1e6, 2) == OFFICIAL_PARAMS_M[name]  # the published count
    assert HATNet.parse_arch(name) == dict(our_arch(OFFICIAL_ARGS[name]), qkv_bias=True)
    with torch.device('meta'):
        model = HATNet(name)
    dims = model.stage_channels
    proj_norm = sum(2 * dim * depth for dim, depth in zip(dims, model.arch_settings['depths']))
    ours = sum(p.numel() for p in model.parameters())
    # ours + the 1000-class head + the unused proj_norm we do not build = the official model
    assert ours + dims[-1] * 1000 + 1000 + proj_norm == params
    # Converter: every official key except proj_norm and the head lands on one of ours.
    converted = convert_hatnet_checkpoint(meta_state_dict(official))
    own = model.state_dict()
    assert set(converted) == set(own)
    assert all(converted[k].shape == own[k].shape for k in own)
    assert convert_hatnet_checkpoint(own) is own  # our own keys pass through unchanged
    assert describe_hmhsa_checkpoint(converted, HATNet) == name
    with_head = convert_hatnet_checkpoint(meta_state_dict(official), with_head=True)
    assert set(with_head) - set(own) == {'head.fc.weight', 'head.fc.bias'}


# Each official arch at full width; the full depth of Tiny (the others with one block per stage
# to keep the suite fast: depth adds blocks, not new layer kinds).
@pytest.mark.parametrize('name,depths', [('tiny', None), ('small', [1, 1, 1, 1]),
                                         ('medium', [1, 1, 1, 1]), ('large', [1, 1, 1, 1])])
def test_matches_official_at_224(name, depths, monkeypatch):
    arch = our_arch(OFFICIAL_ARGS[name])
    if depths:
        arch['depths'] = depths
    sd = random_state_dict(official_shapes(arch), seed=1)
    model = converted_model(arch, sd)
    masks = []
    real_attention = hmhsa_module.multihead_attention

    def spy(*args, key_mask=None, **kwargs):
        masks.append(key_mask)
        return real_attention(*args, key_mask=key_mask, **kwargs)

    monkeypatch.setattr(hmhsa_module, 'multihead_attention', spy)
    x = torch.randn(1, 3, 224, 224, dtype=torch.float64)
    with torch.no_grad():
        feats = model(x)
        logits = F.linear(feats[-1].mean((2, 3)), sd['classifier.1.weight'],
                          sd['classifier.1.bias'])
        expected, expected_logits = reference_forward(sd, x, arch)
    assert masks and all(mask is None for mask in masks)  # the official size pads nothing
    for out, ref in zip(feats, expected):
        assert_close(out, ref, 1e-10)
    assert expected_logits.std() > .1  # the logits carry signal
    assert_close(logits, expected_logits, 1e-6)  # the bound; float64 gives ~1e-13
    assert_close(logits, expected_logits, 1e-10)


@pytest.mark.parametrize('size', [(97, 131), (200, 333), (33, 40), (1, 1)])
def test_padding_never_leaks(size):
    """Odd sizes: valid outputs equal the computation in which no padding exists (GroupNorm
    statistics over the real map, windows and pooled cells holding only existing pixels)."""
    sd = random_state_dict(official_shapes(TINY), seed=2)
    model = converted_model(TINY, sd)
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    with torch.no_grad():
        ours = model(x)
        expected, _ = reference_forward(sd, x, TINY)
    for out, ref, stride in zip(ours, expected, (4, 8, 16, 32)):
        assert out.shape[-2:] == (math.ceil(size[0] / stride), math.ceil(size[1] / stride))
        assert_close(out, ref, 1e-10)


def test_group_norm_sees_only_the_real_map(monkeypatch):
    """Every GroupNorm input has the size of the real map (the backbone never pads a map): with
    window padding that a norm did see, poisoning it would change the outputs (contract test)."""
    sd = random_state_dict(official_shapes(TINY), seed=3)
    model = converted_model(TINY, sd)
    seen = []
    for module in model.modules():
        if isinstance(module, torch.nn.GroupNorm):
            module.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[-2:]))
    with torch.no_grad():
        model(torch.randn(1, 3, 45, 70, dtype=torch.float64))
    real = {(math.ceil(45 / s), math.ceil(70 / s)) for s in (2, 4, 8, 16, 32)}
    pooled = {(math.ceil(h / r), math.ceil(w / r)) for (h, w), r in zip(
        [(12, 18), (6, 9), (3, 5)], TINY['ds_ratios'])}
    assert seen and set(seen) <= real | pooled


# --- release detection -----------------------------------------------------------------------
def test_releases_refuse_each_other():
    hatnet_official = meta_state_dict(official_shapes(our_arch(OFFICIAL_ARGS['small'])))
    transcnn_official = meta_state_dict(official_keys('transcnn', 'small'))
    assert hmhsa_release(hatnet_official) == 'HAT-Net'
    assert hmhsa_release(transcnn_official) == 'TransCNN'
    # Without proj_norm (a re-saved file), the GroupNorm at conv.conv1.0 still tells.
    assert hmhsa_release({k: v for k, v in hatnet_official.items()
                          if 'proj_norm' not in k}) == 'HAT-Net'
    with torch.device('meta'):
        ours = HATNet('tiny').state_dict(), TransCNN('tiny').state_dict()
    assert [hmhsa_release(sd) for sd in ours] == ['HAT-Net', 'TransCNN']
    for sd in (transcnn_official, ours[1]):
        with pytest.raises(ValueError, match=r'a TransCNN checkpoint, not a HAT-Net one.*'
                                             r'mmhvit\.TransCNN'):
            convert_hatnet_checkpoint(sd)
    for sd in (hatnet_official, ours[0]):
        with pytest.raises(ValueError, match=r'a HAT-Net checkpoint, not a TransCNN one.*'
                                             r'mmhvit\.HATNet'):
            convert_transcnn_checkpoint(sd)
    with pytest.raises(ValueError, match='mixes TransCNN keys'):
        hmhsa_release({**ours[0], **ours[1]})
    # A stem-only dict tells neither release: converted, nothing refused.
    stem = {k: v for k, v in hatnet_official.items() if k.startswith('patch_embed.')}
    assert hmhsa_release(stem) is None and convert_hatnet_checkpoint(stem)


@pytest.mark.parametrize('family, other_norm, release', [
    (HATNet, dict(type='BN'), 'HAT-Net'),
    (TransCNN, dict(type='GN', num_groups=1), 'TransCNN'),
])
def test_the_other_norm_still_tells_the_release_and_reloads(family, other_norm, release,
                                                            tmp_path):
    """``norm_cfg`` is the user's: a HAT-Net with BatchNorm statistics is still a HAT-Net, and a
    run's own checkpoint loads back into the model that wrote it."""
    trained = family(tiny_arch(family.__name__), norm_cfg=other_norm).state_dict()
    with torch.no_grad():
        for tensor in trained.values():
            if tensor.is_floating_point():
                tensor.uniform_(-.5, .5)
    assert hmhsa_release(trained) == release
    path = tmp_path / 'epoch_1.pth'
    torch.save({'state_dict': {'backbone.' + k: v for k, v in trained.items()}}, path)
    model = family(tiny_arch(family.__name__), norm_cfg=other_norm,
                   init_cfg=dict(type='Pretrained', checkpoint=str(path), prefix='backbone.'))
    model.init_weights()
    loaded = model.state_dict()
    for key, value in trained.items():
        assert torch.equal(loaded[key], value), key


def test_init_cfg_refuses_a_transcnn_checkpoint(tmp_path):
    sd = {k: torch.zeros(s) for k, s in official_keys('transcnn', 'tiny').items()}
    path = tmp_path / 'TransCNN-Tiny.pth'
    torch.save({'model': sd}, path)
    model = HATNet(TINY, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match='a TransCNN checkpoint, not a HAT-Net one'):
        model.init_weights()
    with pytest.raises(ValueError, match='a TransCNN checkpoint, not a HAT-Net one'):
        convert_file('hatnet', str(path), str(tmp_path / 'x.pth'))
    assert not (tmp_path / 'x.pth').exists()


def test_transcnn_converter_script_refuses_hatnet(tmp_path):
    sd = random_state_dict(official_shapes(TINY), dtype=torch.float32)
    path = tmp_path / 'HAT-Net.pth'
    torch.save(sd, path)
    with pytest.raises(ValueError, match='a HAT-Net checkpoint, not a TransCNN one.*hatnet'):
        convert_file('transcnn', str(path), str(tmp_path / 'x.pth'))
    assert not (tmp_path / 'x.pth').exists()


# --- loading -----------------------------------------------------------------------------------
@pytest.mark.parametrize('wrap', ['model', 'ddp', 'classifier'])
def test_init_cfg_loads_official_and_wrapped_checkpoints(wrap, tmp_path):
    sd = random_state_dict(official_shapes(TINY), seed=4, dtype=torch.float32)
    path = tmp_path / 'weights.pth'
    if wrap == 'model':
        torch.save({'model': sd}, path)
    elif wrap == 'ddp':  # a DDP-wrapped official training checkpoint
        torch.save({'model': {'module.' + k: v for k, v in sd.items()}}, path)
    else:  # our classifier checkpoint (backbone.* and head.fc.*), written by the converter
        torch.save(sd, tmp_path / 'official.pth')
        convert_file('hatnet', str(tmp_path / 'official.pth'), str(path))
    model = HATNet(TINY, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    model.eval()
    x = torch.randn(1, 3, 96, 80)
    with torch.no_grad():
        ours = model(x)
        expected, _ = reference_forward({k: v.double() for k, v in sd.items()}, x.double(),
                                        TINY)
    for out, ref in zip(ours, expected):
        assert_close(out, ref.float(), 1e-4)


def test_checkpoint_of_another_arch_names_both():
    with torch.device('meta'):
        model = HATNet('small')
    official = meta_state_dict(official_shapes(our_arch(OFFICIAL_ARGS['large'])))
    with pytest.raises(ValueError, match=r'arch large, but this model is arch small'):
        model.load_converted(model.convert_checkpoint(official))


def test_config_errors():
    with pytest.raises(ValueError, match=r"HATNet: unknown arch 'huge'.*'large'"):
        HATNet('huge')
    with pytest.raises(ValueError, match='HATNet: embed_dims .* divisible by num_heads'):
        HATNet(dict(TINY, num_heads=[3, 2, 2, 4]))
    with pytest.raises(ValueError, match="H-MHSA mode must be one of .*'global'"):
        HATNet(TINY, attn_mode='global')


def test_iterative_mode_runs_at_any_size():
    model = HATNet(TINY, attn_mode='iterative').eval()
    model.init_weights()
    assert not hasattr(model.stages[0].blocks[0].attn, 'kv')
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 70, 45))
    assert [o.shape[-2:] for o in outs] == [(18, 12), (9, 6), (5, 3), (3, 2)]


# --- MMPretrain classifier from the converted official checkpoint ---------------------------------
@pytest.mark.slow
def test_converted_classifier_reproduces_official_logits(tmp_path):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint
    from mmpretrain.registry import MODELS

    sd = random_state_dict(official_shapes(our_arch(OFFICIAL_ARGS['small'])), seed=5,
                           dtype=torch.float32)
    src, dst = tmp_path / 'HAT-Net_Small.pth', tmp_path / 'converted.pth'
    torch.save({'model': sd}, src)
    output = run_tool('tools/model_converters/hatnet2mmhvit.py', str(src), str(dst),
                      env=tool_env())
    assert "model.backbone.arch='small'" in output

    cfg = Config.fromfile(osp.join(REPO, 'configs', 'hatnet_s_in1k.py'))
    init_default_scope('mmpretrain')
    classifier = MODELS.build(cfg.model)
    checkpoint = load_checkpoint(classifier, str(dst), map_location='cpu', strict=True)
    assert checkpoint['meta']['arch'] == 'small'
    classifier.eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        logits = classifier(x, mode='tensor')
        _, expected = reference_forward(sd, x, our_arch(OFFICIAL_ARGS['small']))
    assert_close(logits, expected, 1e-4)  # float32 both (float64 exactness: tests above)
