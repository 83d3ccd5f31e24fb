"""The contract every backbone fulfils, one suite over the five families (timm's
``test_models.py`` is the model): any input size, out_indices, frozen_stages, norm_eval, with_cp,
init_cfg (single and list), pretrained, argument checks, padding invariance, drop-path schedule.
The per-family files keep the numeric equivalence with the reference implementations."""
import math

import pytest
import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

import mmhvit.models.backbones.base_backbone as base_module
import mmhvit.models.layers.stage as stage_module
from mmhvit.models.backbones import TNT, HATNet, NesT, PyramidTNT, TransCNN
from mmhvit.testing import FAMILIES, TINY_ARCHS, build_tiny, poison_padding

pytestmark = pytest.mark.unit

NAMES = sorted(FAMILIES)
STRIDES = (4, 8, 16, 32)
build = build_tiny


@pytest.fixture(scope='module')
def models():
    torch.manual_seed(0)
    built = {name: build(name).eval() for name in NAMES}
    for model in built.values():
        model.init_weights()
    return built


def grads_of(model, x):
    model.zero_grad()
    sum(out.square().mean() for out in model(x)).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


# --- any input size ------------------------------------------------------------------------------
@pytest.mark.parametrize('size', [(1, 1), (31, 31), (33, 33), (112, 137), (511, 511), (250, 700)])
@pytest.mark.parametrize('name', NAMES)
def test_output_shapes_at_any_size(models, name, size):
    model = models[name]
    with torch.no_grad():
        outs = model(torch.randn(2, 3, *size))
    assert isinstance(outs, tuple) and len(outs) == 4
    for out, channels, stride in zip(outs, model.out_channels, STRIDES):
        assert out.shape == (2, channels, math.ceil(size[0] / stride),
                             math.ceil(size[1] / stride))
        assert torch.isfinite(out).all()


@pytest.mark.parametrize('name', NAMES)
def test_outputs_are_contiguous_nchw(models, name):
    """mmcv's RoIAlign reads its input's memory as NCHW whatever the strides: the channels-last
    maps of four families gave Mask R-CNN's heads the wrong pixels (issue 23). The outputs must be
    contiguous, and RoIAlign on them must then equal RoIAlign on an NCHW copy of the same
    values."""
    from mmcv.ops import roi_align
    with torch.no_grad():
        outs = models[name](torch.randn(2, 3, 64, 96))
    assert all(out.is_contiguous() for out in outs)
    rois = torch.tensor([[0., 4., 6., 40., 30.], [1., 10., 2., 90., 60.]])
    stride4 = outs[0]
    as_channels_last = stride4.contiguous(memory_format=torch.channels_last)
    wrong = roi_align(as_channels_last, rois, (7, 7), 0.25, 2, 'avg', True)
    right = roi_align(stride4, rois, (7, 7), 0.25, 2, 'avg', True)
    assert not torch.allclose(wrong, right)  # the mmcv behaviour the contiguous copy answers
    assert torch.equal(right, roi_align(stride4.clone(), rois, (7, 7), 0.25, 2, 'avg', True))


@pytest.mark.parametrize('name', NAMES)
def test_out_indices_build_only_what_they_use(models, name):
    x = torch.randn(1, 3, 75, 90)
    with torch.no_grad():
        full = models[name](x)
    for subset in [(0, ), (1, 2, 3), (2, ), (0, 3), (-1, )]:
        model = build(name, out_indices=subset).eval()
        indices = model.out_indices
        assert indices == tuple(sorted(i % 4 for i in subset))
        assert len(model.stages) == max(indices) + 1  # nothing built that is never used
        assert model.out_channels == tuple(models[name].stage_channels[i] for i in indices)
        result = model.load_state_dict(models[name].state_dict(), strict=False)
        assert not result.missing_keys
        with torch.no_grad():
            outs = model(x)
        assert len(outs) == len(indices)
        for out, index in zip(outs, indices):
            torch.testing.assert_close(out, full[index])
        # every parameter feeds a requested output (DDP needs no find_unused_parameters)
        model.train()
        sum(out.sum() for out in model(x)).backward()
        assert all(p.grad is not None for p in model.parameters())


# --- frozen_stages, norm_eval, with_cp -----------------------------------------------------------
@pytest.mark.parametrize('frozen', [-1, 0, 1, 2, 3, 4])
@pytest.mark.parametrize('name', NAMES)
def test_frozen_stages(name, frozen):
    model = build(name, frozen_stages=frozen)
    parts = [model.patch_embed, *model.stages]

    def check():
        for index, part in enumerate(parts):
            frozen_here = index <= frozen
            assert all(p.requires_grad != frozen_here for p in part.parameters()), index
            assert part.training != frozen_here or not model.training, index

    check()  # frozen at construction: before any wrapper (DDP) sees the model
    model.train()
    check()
    assert model.training
    model.eval().train()
    check()
    covered = sum(p.numel() for part in parts for p in part.parameters())
    assert covered == sum(p.numel() for p in model.parameters())  # every parameter is in a stage


# Families whose default layers have no BatchNorm get one where they can (TNT's pyramid, HAT-Net's
# norm_cfg).
BN_OPTION = {'TransCNN': {}, 'HATNet': dict(norm_cfg=dict(type='BN')),
             'TNT': dict(pyramid_norm_cfg=dict(type='BN')), 'NesT': None, 'PyramidTNT': {}}


@pytest.mark.parametrize('name', NAMES)
def test_norm_eval(name):
    option = BN_OPTION[name]
    for norm_eval in (False, True):
        model = build(name, norm_eval=norm_eval, **(option or {})).train()
        bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
        if option is None:  # LayerNorm only: norm_eval changes nothing
            assert not bns and all(m.training for m in model.modules())
            continue
        assert bns and all(bn.training != norm_eval for bn in bns)
        others = [m for m in model.modules() if not isinstance(m, _BatchNorm)]
        assert all(m.training for m in others)


def test_norm_eval_keeps_syncbn_reverted_for_one_process_in_eval():
    """MMEngine's Runner reverts SyncBN without a process group (``revert_sync_batchnorm``):
    norm_eval holds those norms too."""
    from mmengine.model import revert_sync_batchnorm
    model = revert_sync_batchnorm(build('PyramidTNT', norm_eval=True,
                                        conv_norm_cfg=dict(type='SyncBN')))
    bns = [m for m in model.train().modules() if isinstance(m, _BatchNorm)]
    assert bns and not any(isinstance(m, nn.SyncBatchNorm) for m in bns)
    assert not any(bn.training for bn in bns)


@pytest.mark.parametrize('name', NAMES)
def test_with_cp_same_outputs_and_gradients(name, monkeypatch):
    torch.manual_seed(0)
    plain = build(name).double().train()
    checkpointed = build(name, with_cp=True).double().train()
    checkpointed.load_state_dict(plain.state_dict())
    calls = []
    original = stage_module.cp.checkpoint
    monkeypatch.setattr(stage_module.cp, 'checkpoint',
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    x = torch.randn(1, 3, 40, 56, dtype=torch.float64)
    expected = grads_of(plain, x)
    assert not calls
    got = grads_of(checkpointed, x)
    assert len(calls) == sum(len(stage.blocks) for stage in checkpointed.stages)
    assert expected.keys() == got.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], msg=key)


# --- initialisation and checkpoints --------------------------------------------------------------
@pytest.mark.parametrize('name', NAMES)
def test_default_init_is_the_official_one(name):
    model = build(name)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    model.init_weights()
    weights = torch.cat([m.weight.flatten() for m in linears])
    assert weights.std().item() == pytest.approx(.02, rel=.15)
    assert all(m.bias is None or not m.bias.any() for m in linears)


@pytest.mark.parametrize('name', NAMES)
def test_list_init_cfg_loads_pretrained_through_the_converter(name, tmp_path):
    """Pretrained entries of a list init_cfg load (prefix stripped, converted); the other entries
    initialise what the checkpoint does not cover."""
    source = build(name, out_indices=(0, ))
    source.init_weights()
    path = tmp_path / 'classifier.pth'
    torch.save({'state_dict': {'backbone.' + k: v for k, v in source.state_dict().items()}}, path)
    model = build(name, init_cfg=[
        dict(type='Constant', layer='Linear', val=0.25, bias=0.),
        dict(type='Pretrained', checkpoint=str(path), prefix='backbone.')
    ])
    model.init_weights()
    loaded = model.state_dict()
    for key, value in source.state_dict().items():
        torch.testing.assert_close(loaded[key], value, msg=key)
    later = [m for m in model.stages[3].modules() if isinstance(m, nn.Linear)]
    assert later and all((m.weight == 0.25).all() for m in later)


@pytest.mark.parametrize('name', NAMES)
def test_pretrained_is_deprecated_and_type_checked(name, tmp_path):
    path = tmp_path / 'weights.pth'
    torch.save(build(name).state_dict(), path)
    with pytest.warns(DeprecationWarning, match='pretrained'):
        model = build(name, pretrained=str(path))
    assert model.init_cfg == dict(type='Pretrained', checkpoint=str(path))
    with pytest.raises(TypeError, match='pretrained must be a str'):
        build(name, pretrained=123)
    with pytest.raises(ValueError, match='cannot be set at the same time'):
        build(name, pretrained=str(path), init_cfg=dict(type='Pretrained', checkpoint='x'))


@pytest.mark.parametrize('name', ['NesT', 'TNT', 'PyramidTNT'])
def test_position_embeddings_resized_on_load_and_logged(name, tmp_path, monkeypatch):
    source = build(name)
    source.init_weights()
    path = tmp_path / 'at64.pth'
    torch.save(source.state_dict(), path)
    logs = []
    monkeypatch.setattr(base_module, 'print_log', lambda msg, **kwargs: logs.append(msg))
    model = build(name, pretrain_img_size=128, init_cfg=dict(type='Pretrained',
                                                             checkpoint=str(path)))
    model.init_weights()
    resized = [msg for msg in logs if 'resized' in msg]
    assert resized and all(msg.startswith(f'{name}: resized') for msg in resized)
    assert any('all' in msg and 'tensors loaded' in msg for msg in logs)


@pytest.mark.parametrize('name', NAMES)
def test_checkpoint_of_another_arch_is_one_clear_error(name, tmp_path):
    arch = dict(TINY_ARCHS[name]['arch'])
    arch['embed_dims'] = [d * 2 for d in arch['embed_dims']] if isinstance(
        arch['embed_dims'], list) else arch['embed_dims'] * 2
    path = tmp_path / 'other.pth'
    torch.save(build(name, arch=arch).state_dict(), path)
    model = build(name, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match=rf'made for {name} arch .* but this model is arch'):
        model.init_weights()


# --- arguments -----------------------------------------------------------------------------------
@pytest.mark.parametrize('name', NAMES)
def test_argument_errors(name):
    cases = [
        (TypeError, 'in_channels must be a positive int', dict(in_channels=0)),
        (ValueError, r'drop_path_rate must be a number in \[0, 1\)', dict(drop_path_rate=1.5)),
        (ValueError, 'drop_rate must be', dict(drop_rate='0.1')),
        (TypeError, 'with_cp must be a bool', dict(with_cp='yes')),
        (TypeError, 'norm_eval must be a bool', dict(norm_eval=1)),
        (TypeError, 'qkv_bias must be a bool or None', dict(qkv_bias=0)),
        (TypeError, 'norm_cfg must be a dict', dict(norm_cfg='BN')),
        (ValueError, r'frozen_stages must be an int in -1..4', dict(frozen_stages=5)),
        (ValueError, 'distinct outputs in 0..3', dict(out_indices=(4, ))),
        (ValueError, 'distinct outputs in 0..3', dict(out_indices=(1, 1))),
        (TypeError, 'out_indices must be an int or a non-empty sequence', dict(out_indices=())),
        (TypeError, 'arch must be a str or a dict', dict(arch=3)),
        (ValueError, 'unknown arch', dict(arch='huge')),
        (TypeError, 'unexpected keyword', dict(drop_paths=0.1)),
    ]
    for error, message, kwargs in cases:
        with pytest.raises(error, match=message):
            build(name, **kwargs)


@pytest.mark.parametrize('name', NAMES)
def test_input_errors(models, name):
    model = models[name]
    with pytest.raises(ValueError, match='3 input channels, got 1'):
        model(torch.randn(1, 1, 64, 64))
    with pytest.raises(ValueError, match='NCHW batch'):
        model(torch.randn(3, 64, 64))
    with pytest.raises(ValueError, match='at least 1x1 pixel, got 0x64'):
        model(torch.randn(1, 3, 0, 64))


def test_one_vocabulary():
    """The same argument means the same thing with the same default in every family."""
    import inspect
    base = inspect.signature(base_module.HViTBackbone.__init__).parameters
    assert base['drop_path_rate'].default == 0.1 and base['qkv_bias'].default is None
    for cls in FAMILIES.values():
        own = inspect.signature(cls.__init__).parameters
        assert 'kwargs' in own and not set(own) & (set(base) - {'self', 'arch', 'kwargs'})
        assert isinstance(cls.arch_zoo, dict) and 'qkv_bias' in cls.optional_keys
        for arch in cls.arch_zoo.values():
            assert {'embed_dims', 'depths', 'num_heads'} <= set(arch)
    # None: the arch's value, which is what its official weights have
    assert [cls.optional_keys['qkv_bias']
            for cls in (TransCNN, HATNet, NesT, TNT, PyramidTNT)] == [True, True, True, False,
                                                                      False]


@pytest.mark.parametrize('name', NAMES)
def test_drop_path_schedule_is_linear_over_all_blocks(name):
    arch = dict(TINY_ARCHS[name]['arch'], depths=[2, 1, 1, 1])
    model = build(name, arch=arch, drop_path_rate=0.3)
    rates = [m.drop_prob for m in model.modules() if type(m).__name__ == 'DropPath']
    # A TNT block holds an inner and an outer layer; PyramidTNT's second block of stage 1 has no
    # inner layer (only the first block of a stage has words).
    per_block = {'TNT': [2] * 4, 'PyramidTNT': [1, 2, 2, 2]}.get(name, [1] * 4)
    expected = [r for r, n in zip((0.075, 0.15, 0.225, 0.3), per_block) for _ in range(n)]
    assert rates == pytest.approx(expected)  # block 1 has rate 0: no DropPath module


# --- padding invariance --------------------------------------------------------------------------
@pytest.mark.parametrize('name', NAMES)
def test_padding_never_changes_valid_outputs(models, name, monkeypatch):
    """Token padding (partial windows / blocks, whole padded sentences) is masked: filling it
    with large values instead of zeros changes no valid output. PyramidTNT pads no token (partial
    pooled cells average the sentences that exist): nothing to poison, nothing changes."""
    model = models[name]
    x = torch.randn(1, 3, 45, 70)
    with torch.no_grad():
        expected = model(x)
    if name == 'TNT':
        poisoned = build(name, size_divisor=64).eval()  # a whole row and column of padding
        poisoned.load_state_dict(model.state_dict())
    else:
        calls = poison_padding(monkeypatch)
        poisoned = model
    with torch.no_grad():
        got = poisoned(x)
    if name == 'PyramidTNT':
        assert not calls, 'PyramidTNT padded tokens: they would need a mask'
    elif name != 'TNT':
        assert calls, 'no padding happened: the test would prove nothing'
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
