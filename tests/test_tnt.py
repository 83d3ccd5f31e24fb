"""TNT backbone: equivalence with timm and mmpretrain, the pyramid at any size, the contract."""
import importlib.util
import itertools
import math
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO

from mmhvit.models.backbones.tnt import TNT, convert_tnt_checkpoint, detect_tnt_layout

timm = pytest.importorskip('timm')
from timm.models.tnt import TNT as TimmTNT  # noqa: E402
from timm.models.tnt import checkpoint_filter_fn  # noqa: E402

TINY = dict(embed_dims_inner=8, embed_dims_outer=32, num_layers=4, num_heads_inner=2,
            num_heads_outer=2)
TINY_TIMM = dict(patch_size=16, embed_dim=32, inner_dim=8, depth=4, num_heads_inner=2,
                 num_heads_outer=2)
ALL_BLOCKS = (1, 2, 3, 4)


def tiny(**kwargs):
    kwargs.setdefault('arch', TINY)
    kwargs.setdefault('out_blocks', ALL_BLOCKS)
    kwargs.setdefault('drop_path_rate', 0.)
    return TNT(**kwargs)


def timm_tiny(img_size=64, legacy=False, num_classes=10):
    torch.manual_seed(0)
    model = TimmTNT(img_size=img_size, num_classes=num_classes, legacy=legacy, **TINY_TIMM).eval()
    # timm zero-initialises biases and sets LNs to 1/0: randomise everything so that a swapped or
    # misnamed tensor cannot go unnoticed.
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model


def split_head(converted):
    backbone = {k: v for k, v in converted.items() if not k.startswith('head.')}
    return backbone, converted['head.weight'], converted['head.bias']


def load_tool():
    path = osp.join(REPO, 'tools', 'model_converters', 'tnt2mmhvit.py')
    spec = importlib.util.spec_from_file_location('tnt2mmhvit', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- equivalence with the reference implementations ----------------------------------------------
@torch.no_grad()
def test_tnt_s_logits_equal_timm_at_224():
    torch.manual_seed(0)
    ref = timm.create_model('tnt_s_patch16_224', pretrained=False).eval()
    assert not any(m.legacy for m in ref.blocks)  # the official layout
    backbone, weight, bias = split_head(convert_tnt_checkpoint(ref.state_dict()))
    ours = TNT('small', out_type='cls_token', out_indices=(3, )).eval()
    assert ours.load_state_dict(backbone, strict=True)
    x = torch.randn(1, 3, 224, 224)
    logits = F.linear(ours(x)[0], weight, bias)
    expected = ref(x)
    assert (logits - expected).abs().max() < 1e-4
    assert expected.abs().max() > 0.1  # a meaningful comparison


@pytest.mark.parametrize('legacy', [False, True])
@torch.no_grad()
def test_tiny_blocks_and_logits_equal_timm(legacy):
    ref = timm_tiny(legacy=legacy)
    assert detect_tnt_layout(ref.state_dict()) == 'timm'
    backbone, weight, bias = split_head(convert_tnt_checkpoint(ref.state_dict()))
    x = torch.randn(2, 3, 64, 64)
    raw = tiny(out_type='raw', final_norm=False, legacy=legacy, pretrain_img_size=64).eval()
    assert raw.load_state_dict(backbone, strict=False).missing_keys == []
    expected = ref.forward_intermediates(x, indices=[0, 1, 2, 3], intermediates_only=True)
    for ours, theirs in zip(raw(x), expected):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)
    cls = tiny(out_type='cls_token', out_indices=(3, ), legacy=legacy, pretrain_img_size=64).eval()
    assert cls.load_state_dict(backbone, strict=True)
    torch.testing.assert_close(F.linear(cls(x)[0], weight, bias), ref(x), atol=1e-5, rtol=1e-4)


def test_official_layout_is_ours_and_timm_reads_it_the_same():
    """timm's own official->timm filter turns our layout (+ the official unused outer_tokens)
    back into timm's state dict: our names and the inner_pos layout are the official ones."""
    ref = timm_tiny()
    ours = convert_tnt_checkpoint(ref.state_dict())
    official = dict(ours, outer_tokens=torch.zeros(1, 16, 32))
    assert detect_tnt_layout(official) == 'official'
    back = checkpoint_filter_fn(dict(official), ref)
    expected = ref.state_dict()
    assert set(back) == set(expected)
    for key in expected:
        torch.testing.assert_close(back[key], expected[key], rtol=0, atol=0)
    # Official (= our) keys pass through unchanged; outer_tokens is dropped.
    again = convert_tnt_checkpoint(official)
    assert list(again) == list(ours)
    assert all(again[k] is ours[k] for k in ours)


@torch.no_grad()
def test_legacy_equals_mmpretrain_tnt():
    pytest.importorskip('mmpretrain')
    from mmpretrain.models.backbones import TNT as MMPretrainTNT
    torch.manual_seed(1)
    ref = MMPretrainTNT(arch=TINY, img_size=64)
    ref.eval()  # (its train() returns None)
    with torch.no_grad():
        for param in ref.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    state = {'backbone.' + k: v for k, v in ref.state_dict().items()}
    converted = convert_tnt_checkpoint(state)
    ours = tiny(out_type='cls_token', out_indices=(3, ), legacy=True, pretrain_img_size=64).eval()
    assert ours.load_state_dict(converted, strict=True)
    x = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(ours(x)[0], ref(x)[0], atol=1e-5, rtol=1e-4)


def test_param_counts_match_timm():
    counts = {}
    for arch, dim in (('small', 384), ('base', 640)):
        model = TNT(arch, out_type='cls_token')
        params = sum(p.numel() for p in model.parameters()) + dim * 1000 + 1000  # + the head
        counts[arch] = round(params / 1e6, 2)
        del model
    assert counts == {'small': 23.77, 'base': 65.43}


def test_cli_checkpoint_loads_into_in1k_config_and_gives_timm_logits(tmp_path):
    pytest.importorskip('mmpretrain')
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint
    from mmpretrain.registry import MODELS
    from safetensors.torch import save_file

    torch.manual_seed(2)
    ref = timm.create_model('tnt_s_patch16_224', pretrained=False).eval()
    src, dst = tmp_path / 'tnt_s.safetensors', tmp_path / 'tnt_s_mmhvit.pth'
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(src))
    load_tool().main([str(src), str(dst)])
    saved = torch.load(dst, map_location='cpu', weights_only=True)
    assert saved['meta']['source_layout'] == 'timm' and saved['meta']['arch'] == 'small'

    cfg = Config.fromfile(osp.join(REPO, 'configs', 'tnt_s_in1k.py'))
    init_default_scope('mmpretrain')
    classifier = MODELS.build(cfg.model).eval()
    assert type(classifier.backbone).__module__ == 'mmhvit.models.backbones.tnt'
    load_checkpoint(classifier, str(dst), map_location='cpu', strict=True)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(classifier(x, mode='tensor'), ref(x), atol=1e-4, rtol=1e-4)


# --- checkpoints through init_cfg ----------------------------------------------------------------
def test_pretrained_official_pth_tar_and_timm_safetensors(tmp_path):
    from safetensors.torch import save_file
    ref = timm_tiny()
    ours = convert_tnt_checkpoint(ref.state_dict())
    official = tmp_path / 'tnt_official.pth.tar'
    torch.save({'state_dict': dict(ours, outer_tokens=torch.zeros(1, 16, 32)), 'epoch': 3},
               official)
    timm_file = tmp_path / 'tnt_timm.safetensors'
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(timm_file))
    for path in (official, timm_file):
        model = tiny(pretrain_img_size=64, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
        model.init_weights()
        for key, value in model.state_dict().items():
            if not key.startswith('pyramid.'):
                torch.testing.assert_close(value, ours[key], rtol=0, atol=0)


def test_checkpoint_at_other_size_resizes_sentence_pos(tmp_path):
    src = tiny(pretrain_img_size=64)  # 4 x 4 sentence grid
    path = tmp_path / 'tiny64.pth'
    torch.save(src.state_dict(), path)
    model = tiny(pretrain_img_size=(96, 128),
                 init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    grid = src.outer_pos[:, 1:].reshape(1, 4, 4, 32).permute(0, 3, 1, 2)
    expected = F.interpolate(grid, size=(6, 8), mode='bicubic', align_corners=False)
    torch.testing.assert_close(model.outer_pos[:, 1:],
                               expected.flatten(2).transpose(1, 2).detach())
    torch.testing.assert_close(model.outer_pos[:, :1], src.outer_pos[:, :1])
    # Interpolating in forward to the real grid gives the same as loading at that size.
    src.eval(), model.eval()
    x = torch.randn(1, 3, 96, 128)
    with torch.no_grad():
        for a, b in zip(src(x), model(x)):
            torch.testing.assert_close(a, b)


def test_checkpoint_of_another_arch_is_refused(tmp_path):
    path = tmp_path / 'tiny.pth'
    torch.save({'state_dict': tiny().state_dict()}, path)
    other = dict(TINY, embed_dims_outer=48)
    model = tiny(arch=other, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match=r'embed_dims_outer=32.*this model is arch custom '
                       r'\(embed_dims_inner=8, embed_dims_outer=48'):
        model.init_weights()
    legacy = tiny(legacy=True, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match=r'this model is arch .*\(legacy\)'):
        legacy.init_weights()


# --- any input size ------------------------------------------------------------------------------
SIZES = [(224, 224), (256, 320), (97, 131), (800, 1344)]
SUBSETS = [s for r in range(1, 5) for s in itertools.combinations(range(4), r)]


@pytest.mark.parametrize('size', SIZES)
@torch.no_grad()
def test_pyramid_shapes_and_values_for_every_out_indices_subset(size):
    torch.manual_seed(0)
    full = tiny().eval()
    x = torch.randn(1, 3, *size)
    outs = full(x)
    strides = (4, 8, 16, 32)
    assert [tuple(o.shape) for o in outs] == [
        (1, 32, math.ceil(size[0] / s), math.ceil(size[1] / s)) for s in strides
    ]
    raw = tiny(out_type='raw').eval()
    raw.load_state_dict(full.state_dict(), strict=False)
    assert [tuple(o.shape) for o in raw(x)] == [
        (1, 32, math.ceil(size[0] / 16), math.ceil(size[1] / 16))
    ] * 4
    if size[0] > 300:  # subsets at the large size: shapes and values of a few are enough
        subsets = [(0, ), (1, 2, 3), (3, )]
    else:
        subsets = SUBSETS
    for subset in subsets:
        model = tiny(out_indices=subset).eval()
        result = model.load_state_dict(full.state_dict(), strict=False)
        assert result.missing_keys == []
        got = model(x)
        assert len(got) == len(subset)
        for out, index in zip(got, subset):
            torch.testing.assert_close(out, outs[index])


@pytest.mark.parametrize('out_type', ['pyramid', 'cls_token'])
@torch.no_grad()
def test_padded_sentences_never_leak(out_type):
    """size_divisor=32 pads a 208 x 240 image with a whole row and column of sentences: the valid
    outputs must equal the model that never saw them (size_divisor=16, no whole padded sentence).
    The SE mean is masked as well."""
    torch.manual_seed(0)
    arch = dict(TINY, se=True)
    exact = tiny(arch=arch, out_type=out_type).eval()
    padded = tiny(arch=arch, out_type=out_type, size_divisor=32).eval()
    padded.load_state_dict(exact.state_dict())
    x = torch.randn(2, 3, 208, 240)
    for a, b in zip(exact(x), padded(x)):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


# --- backbone contract ---------------------------------------------------------------------------
def test_frozen_stages():
    model = tiny(frozen_stages=2)
    model.train()
    frozen = [model.patch_embed, model.proj_norm1, model.proj, model.proj_norm2, *model.blocks[:2]]
    for module in frozen:
        assert not module.training
        assert all(not p.requires_grad for p in module.parameters())
    assert not (model.cls_token.requires_grad or model.outer_pos.requires_grad
                or model.inner_pos.requires_grad)
    for module in (*model.blocks[2:], model.norm, model.pyramid):
        assert module.training
        assert all(p.requires_grad for p in module.parameters())
    everything = tiny(frozen_stages=4)
    everything.train()
    assert not everything.norm.training and not everything.norm.weight.requires_grad
    assert all(p.requires_grad for p in everything.pyramid.parameters())
    with pytest.raises(ValueError, match='frozen_stages must be in -1..4'):
        tiny(frozen_stages=5)


def test_norm_eval():
    for norm_eval in (False, True):
        model = tiny(pyramid_norm_cfg=dict(type='BN'), norm_eval=norm_eval)
        model.train()
        bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        assert bns and all(bn.training != norm_eval for bn in bns)


def test_with_cp_same_outputs_and_gradients():
    torch.manual_seed(0)
    plain, checkpointed = tiny(), tiny(with_cp=True)
    checkpointed.load_state_dict(plain.state_dict())
    x = torch.randn(1, 3, 64, 96)
    grads = []
    for model in (plain, checkpointed):
        model.train()
        sum(o.square().mean() for o in model(x)).backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], msg=name)


def test_unused_trailing_blocks_are_not_run():
    model = tiny(out_indices=(1, ))
    model(torch.randn(1, 3, 64, 64))[0].sum().backward()
    assert model.blocks[1].outer_mlp.fc2.weight.grad is not None
    assert all(p.grad is None for p in model.blocks[2].parameters())
    # Only the op of output 1 exists (others hold no parameter to be left without gradient).
    assert [type(op).__name__ for op in model.pyramid.ops] == [
        'Identity', 'ConvTranspose2d', 'Identity', 'Identity'
    ]
    assert model.pyramid.ops[1].weight.grad is not None


@torch.no_grad()
def test_repeated_out_blocks_make_a_vitdet_pyramid_from_one_map():
    torch.manual_seed(0)
    model = tiny(out_blocks=(4, 4, 4, 4)).eval()
    raw = tiny(out_type='raw', out_indices=(3, )).eval()
    raw.load_state_dict(model.state_dict(), strict=False)
    x = torch.randn(1, 3, 80, 112)
    outs = model(x)
    assert [tuple(o.shape[-2:]) for o in outs] == [(20, 28), (10, 14), (5, 7), (3, 4)]
    torch.testing.assert_close(outs[2], raw(x)[0])
    torch.testing.assert_close(outs[3], F.max_pool2d(raw(x)[0], 2, 2, ceil_mode=True))


def test_drop_path_is_linear_over_blocks():
    model = tiny(drop_path_rate=0.3)
    rates = [getattr(block.drop_path, 'drop_prob', 0.) for block in model.blocks]
    assert rates == pytest.approx([0., 0.1, 0.2, 0.3])


# --- bad input and bad configuration -------------------------------------------------------------
def test_bad_input():
    model = tiny()
    with pytest.raises(ValueError, match='3 input channels, got 1'):
        model(torch.randn(1, 1, 64, 64))
    with pytest.raises(ValueError, match='at least 32x32 pixels, got 31x64'):
        model(torch.randn(1, 3, 31, 64))
    with pytest.raises(ValueError, match='NCHW'):
        model(torch.randn(3, 64, 64))
    # 32 x 32 is the smallest accepted image.
    assert [tuple(o.shape[-2:]) for o in model(torch.randn(1, 3, 32, 33))] == [(8, 9), (4, 5),
                                                                                 (2, 3), (1, 2)]


def test_bad_configuration():
    with pytest.raises(ValueError, match=r"unknown arch 'huge'.*'base'.*'small'.*'tiny'"):
        TNT('huge')
    with pytest.raises(ValueError, match=r"missing \['num_heads_outer'\]"):
        TNT({k: v for k, v in TINY.items() if k != 'num_heads_outer'})
    with pytest.raises(ValueError, match='not divisible'):
        TNT(dict(TINY, num_heads_outer=3))
    with pytest.raises(ValueError, match='out_type must be one of'):
        tiny(out_type='tokens')
    with pytest.raises(ValueError, match=r'out_blocks must be 4 block numbers in 1..4'):
        tiny(out_blocks=(1, 2, 3, 5))
    with pytest.raises(ValueError, match='size_divisor must be a positive multiple of 16'):
        tiny(size_divisor=24)
    with pytest.raises(ValueError, match='out_indices'):
        tiny(out_indices=(4, ))
    assert TNT('S').arch_name == 'small' and tiny().out_blocks == ALL_BLOCKS
    assert TNT(TINY).out_blocks == (1, 2, 3, 4) and TNT('small').out_blocks == (3, 6, 9, 12)
