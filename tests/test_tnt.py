"""TNT backbone: equivalence with timm and mmpretrain, checkpoints, the pyramid (the contract
shared by all backbones is in test_backbone_contract.py)."""
import math
import os.path as osp

import pytest
import timm
import torch
import torch.nn.functional as F
from conftest import REPO
from timm.models.tnt import checkpoint_filter_fn

from mmhvit.cli import main as mmhvit_command
from mmhvit.models.backbones import TNT
from mmhvit.models.converters.tnt import (
    convert_tnt_checkpoint,
    describe_tnt_checkpoint,
    detect_tnt_layout,
    timm_to_official,
)
from mmhvit.models.layers import ClassTokenWindowAttention, words_to_map
from mmhvit.testing import poison_padding, timm_tnt, tiny_arch

pytestmark = pytest.mark.unit
TINY = tiny_arch('TNT')
DIM = TINY['embed_dims']


def tiny(**kwargs):
    kwargs.setdefault('arch', TINY)
    kwargs.setdefault('drop_path_rate', 0.)
    return TNT(**kwargs)


def timm_tiny(img_size=64, legacy=False):
    return timm_tnt(TINY, img_size=img_size, legacy=legacy)


def split_head(converted):
    backbone = {k: v for k, v in converted.items() if not k.startswith('head.')}
    return backbone, converted['head.weight'], converted['head.bias']


# --- equivalence with the reference implementations ----------------------------------------------
@torch.no_grad()
def test_tnt_s_logits_equal_timm_at_224():
    torch.manual_seed(0)
    ref = timm.create_model('tnt_s_patch16_224', pretrained=False).eval()
    assert not any(m.legacy for m in ref.blocks)  # the official layout
    backbone, weight, bias = split_head(convert_tnt_checkpoint(ref.state_dict(), with_head=True))
    ours = TNT('small', out_type='cls_token', out_indices=(3, )).eval()
    ours.load_state_dict(backbone, strict=True)
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
    backbone, weight, bias = split_head(convert_tnt_checkpoint(ref.state_dict(), with_head=True))
    x = torch.randn(2, 3, 64, 64)
    raw = tiny(out_type='raw', final_norm=False, legacy=legacy, pretrain_img_size=64).eval()
    assert raw.load_state_dict(backbone, strict=False).missing_keys == []
    expected = ref.forward_intermediates(x, indices=[0, 1, 2, 3], intermediates_only=True)
    for ours, theirs in zip(raw(x), expected):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)
    cls = tiny(out_type='cls_token', out_indices=(3, ), legacy=legacy, pretrain_img_size=64).eval()
    cls.load_state_dict(backbone, strict=True)
    torch.testing.assert_close(F.linear(cls(x)[0], weight, bias), ref(x), atol=1e-5, rtol=1e-4)


def test_official_names_are_the_official_ones():
    """Our table of official names is right: timm's own official->timm filter turns the official
    dict we derive from a timm model (+ the official unused outer_tokens) back into that timm
    state dict, and the official and timm files convert to the same tensors of ours."""
    ref = timm_tiny()
    official = dict(timm_to_official(ref.state_dict()), outer_tokens=torch.zeros(1, 16, DIM))
    assert detect_tnt_layout(official) == 'official'
    back = checkpoint_filter_fn(dict(official), ref)
    expected = ref.state_dict()
    assert set(back) == set(expected)
    for key in expected:
        torch.testing.assert_close(back[key], expected[key], rtol=0, atol=0)
    ours = convert_tnt_checkpoint(ref.state_dict(), with_head=True)
    again = convert_tnt_checkpoint(official, with_head=True)
    assert list(again) == list(ours)
    assert all(torch.equal(again[k], ours[k]) for k in ours)
    # Our own keys pass through unchanged.
    assert convert_tnt_checkpoint(ours, with_head=True) == ours


@torch.no_grad()
def test_legacy_equals_mmpretrain_tnt():
    from mmpretrain.models.backbones import TNT as MMPretrainTNT
    torch.manual_seed(1)
    ref = MMPretrainTNT(arch=dict(embed_dims_inner=TINY['inner_dims'], embed_dims_outer=DIM,
                                  num_layers=sum(TINY['depths']),
                                  num_heads_inner=TINY['inner_num_heads'],
                                  num_heads_outer=TINY['num_heads']), img_size=64)
    ref.eval()  # (its train() returns None)
    with torch.no_grad():
        for param in ref.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    state = {'backbone.' + k: v for k, v in ref.state_dict().items()}
    converted = convert_tnt_checkpoint(state)
    ours = tiny(out_type='cls_token', out_indices=(3, ), legacy=True, pretrain_img_size=64).eval()
    ours.load_state_dict(converted, strict=True)
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


@pytest.mark.slow
def test_cli_checkpoint_loads_into_in1k_config_and_gives_timm_logits(tmp_path):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint
    from mmpretrain.registry import MODELS
    from safetensors.torch import save_file

    torch.manual_seed(2)
    ref = timm.create_model('tnt_s_patch16_224', pretrained=False).eval()
    src, dst = tmp_path / 'tnt_s.safetensors', tmp_path / 'tnt_s_mmhvit.pth'
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(src))
    mmhvit_command(['convert', 'tnt', str(src), str(dst)])
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
    torch.save({'state_dict': dict(timm_to_official(ref.state_dict()),
                                   outer_tokens=torch.zeros(1, 16, DIM)), 'epoch': 3}, official)
    timm_file = tmp_path / 'tnt_timm.safetensors'
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(timm_file))
    for path in (official, timm_file):
        model = tiny(pretrain_img_size=64, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
        model.init_weights()
        for key, value in model.state_dict().items():
            if '.out_proj.' not in key and '.out_norm.' not in key:
                torch.testing.assert_close(value, ours[key], rtol=0, atol=0)


def test_checkpoint_at_other_size_resizes_sentence_pos(tmp_path):
    src = tiny(pretrain_img_size=64)  # 4 x 4 sentence grid
    src.init_weights()
    path = tmp_path / 'tiny64.pth'
    torch.save(src.state_dict(), path)
    model = tiny(pretrain_img_size=(96, 128),
                 init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    src_pos, pos = src.patch_embed.pos_embed, model.patch_embed.pos_embed
    grid = src_pos[:, 1:].reshape(1, 4, 4, DIM).permute(0, 3, 1, 2)
    expected = F.interpolate(grid, size=(6, 8), mode='bicubic', align_corners=False)
    torch.testing.assert_close(pos[:, 1:], expected.flatten(2).transpose(1, 2).detach())
    torch.testing.assert_close(pos[:, :1], src_pos[:, :1])
    # Interpolating in forward to the real grid gives the same as loading at that size.
    src.eval(), model.eval()
    x = torch.randn(1, 3, 96, 128)
    with torch.no_grad():
        for a, b in zip(src(x), model(x)):
            torch.testing.assert_close(a, b)


def test_checkpoint_of_another_arch_is_refused(tmp_path):
    path = tmp_path / 'tiny.pth'
    torch.save({'state_dict': tiny().state_dict()}, path)
    other = dict(TINY, embed_dims=48)
    model = tiny(arch=other, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match=rf'embed_dims={DIM}.*this model is arch custom '
                       r".*'embed_dims': 48"):
        model.init_weights()
    legacy = tiny(legacy=True, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match=r'this model is arch .*\(legacy\)'):
        legacy.init_weights()


# --- any input size ------------------------------------------------------------------------------
@pytest.mark.parametrize('size', [(224, 224), (97, 131)])
@torch.no_grad()
def test_raw_maps_are_the_stride_16_sentences(size):
    torch.manual_seed(0)
    full = tiny().eval()
    raw = tiny(out_type='raw').eval()
    raw.load_state_dict(full.state_dict(), strict=False)
    x = torch.randn(1, 3, *size)
    maps = raw(x)
    assert [tuple(o.shape) for o in maps] == [
        (1, DIM, math.ceil(size[0] / 16), math.ceil(size[1] / 16))
    ] * 4
    # the stride-16 pyramid output is the raw map, normalised (no rescaling)
    torch.testing.assert_close(full(x)[2], full.stages[2].out_norm(maps[2]))


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


# --- TNT's stages ---------------------------------------------------------------------------------
def test_stage_modules_hold_their_output_and_the_final_norm():
    model = tiny(out_indices=(1, 3))
    assert [stage.out_proj is not None for stage in model.stages] == [False, True, False, True]
    assert [stage.norm is not None for stage in model.stages] == [False, False, False, True]
    assert tiny(out_indices=(1, )).stages[-1].norm is None  # the last block is not built
    assert len(tiny(out_indices=(1, )).stages) == 2


@torch.no_grad()
def test_empty_stages_make_a_vitdet_pyramid_from_one_map():
    torch.manual_seed(0)
    model = tiny(arch=dict(TINY, depths=[4, 0, 0, 0])).eval()
    raw = tiny(arch=dict(TINY, depths=[4, 0, 0, 0]), out_type='raw', out_indices=(3, )).eval()
    raw.load_state_dict(model.state_dict(), strict=False)
    x = torch.randn(1, 3, 80, 112)
    outs = model(x)
    assert [tuple(o.shape[-2:]) for o in outs] == [(20, 28), (10, 14), (5, 7), (3, 4)]
    torch.testing.assert_close(outs[2], raw(x)[0])
    torch.testing.assert_close(outs[3], F.max_pool2d(raw(x)[0], 2, 2, ceil_mode=True))


@torch.no_grad()
def test_words_to_map_tiles_the_words_where_the_stem_made_them():
    """The legacy stem convolves the whole image and cuts the stride-4 map into words: laying
    the words back out must give that map."""
    torch.manual_seed(0)
    embed = tiny(legacy=True).patch_embed
    x = torch.randn(2, 3, 48, 80)
    words = embed.words(x) - embed.word_pos_embed
    side = embed.words_per_side
    torch.testing.assert_close(words_to_map(words, 2, (3, 5), side), embed.word_embed(x))


def test_word_maps_only_where_the_output_is_finer_than_the_sentences():
    assert [s.word_map is not None for s in tiny(word_maps=True).stages] == [True, True, False,
                                                                             False]
    assert [s.word_map is not None for s in tiny().stages] == [False] * 4  # the paper's pyramid
    assert all(s.word_map is None for s in tiny(out_type='raw', word_maps=True).stages)
    # strides 4 and 8 of 4-px words
    assert [s.word_map.pool for s in tiny(word_maps=True).stages[:2]] == [1, 2]
    # 8-px sentences: only the stride-4 output is finer
    p8 = tiny(arch=dict(TINY, patch_size=8, word_size=4), word_maps=True)
    assert [s.word_map is not None for s in p8.stages] == [True, False, False, False]


@torch.no_grad()
def test_conv_stem_makes_the_words_from_the_whole_image():
    """The convolutional stem (arch ``conv_stem``) sees across patch borders, where the official
    per-patch 7x7 conv does not: a pixel changed in one sentence moves its neighbour's words."""
    torch.manual_seed(0)
    stem = tiny(arch=dict(TINY, conv_stem=True)).eval().patch_embed
    official = tiny().eval().patch_embed
    x = torch.randn(1, 3, 32, 32)
    changed = x.clone()
    changed[..., 0, 15] += 10  # the last column of the top-left 16 x 16 sentence
    for embed, crosses in ((stem, True), (official, False)):
        neighbour = (embed.words(x) - embed.words(changed))[1]  # the sentence to its right
        assert (neighbour.abs().amax() > 0) == crosses
    # one 3x3 stride-2 conv + BN + ReLU per halving of the 4-px words (d/4, d/2 wide), then 1x1
    convs = [m for m in stem.word_embed.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.stride) for c in convs] == [
        (DIM // 4, (2, 2)), (DIM // 2, (2, 2)), (TINY['inner_dims'], (1, 1))]


def test_conv_stem_checkpoint_loads_into_a_conv_stem_model(tmp_path):
    """A conv-stem classifier's weights start a conv-stem segmenter (the UperNet quickstart)."""
    torch.manual_seed(0)
    arch = dict(TINY, conv_stem=True)
    src = tiny(arch=arch).eval()
    path = tmp_path / 'classifier.pth'
    torch.save({'state_dict': {'backbone.' + k: v for k, v in src.state_dict().items()}}, path)
    model = tiny(arch=arch, init_cfg=dict(type='Pretrained', checkpoint=str(path),
                                          prefix='backbone.')).eval()
    model.init_weights()
    x = torch.randn(1, 3, 48, 64)
    with torch.no_grad():
        for a, b in zip(src(x), model(x)):
            torch.testing.assert_close(a, b)
    assert describe_tnt_checkpoint(src.state_dict(), TNT).endswith('(conv stem)')


@pytest.mark.parametrize('size', [(64, 64), (50, 90), (17, 33)])
def test_conv_stem_at_odd_sizes_trains(size):
    torch.manual_seed(0)
    model = tiny(arch=dict(TINY, conv_stem=True))
    outs = model(torch.randn(2, 3, *size))
    assert [tuple(o.shape[-2:]) for o in outs] == [
        (math.ceil(size[0] / s), math.ceil(size[1] / s)) for s in (4, 8, 16, 32)]
    sum(o.mean() for o in outs).backward()
    assert all(p.grad is not None for p in model.patch_embed.word_embed.parameters())
    # the official archs keep the official stem (their checkpoints' word_embed)
    assert isinstance(TNT('small').patch_embed.word_embed, torch.nn.Conv2d)


@torch.no_grad()
@pytest.mark.parametrize('size', [(64, 64), (50, 90)])
def test_word_maps_add_to_the_upsampled_sentences(size):
    torch.manual_seed(0)
    model = tiny(word_maps=True).eval()
    plain = tiny().eval()
    result = plain.load_state_dict(model.state_dict(), strict=False)
    assert result.missing_keys == [] and all('word_map' in k for k in result.unexpected_keys)
    x = torch.randn(2, 3, *size)
    with_words, without = model(x), plain(x)
    for i in (2, 3):
        torch.testing.assert_close(with_words[i], without[i])
    stage_outputs = []
    model.stages[0].register_forward_hook(lambda module, args, out: stage_outputs.append(out))
    model(x)
    words = stage_outputs[0][0]  # the words after stage 1
    padded = tuple(math.ceil(side / 16) for side in size)  # the sentence grid of 16-px patches
    fine = model.stages[0].word_map(words, 2, padded)
    fine = fine[..., :with_words[0].shape[-2], :with_words[0].shape[-1]]
    torch.testing.assert_close(with_words[0], without[0] + fine)
    assert not torch.allclose(with_words[1], without[1])


# --- windowed outer attention (ViTDet) -----------------------------------------------------------
# The tiny arch has one block per stage: by default all would stay global.
WINDOWED = dict(window_size=2, global_blocks=[1])


def windowed_pair(arch=TINY, **kwargs):
    """A global model and the same weights with windowed outer attention."""
    torch.manual_seed(0)
    full = tiny(arch=arch, **kwargs).eval()
    full.init_weights()
    windowed = tiny(arch=arch, **WINDOWED, **kwargs).eval()
    windowed.load_state_dict(full.state_dict(), strict=True)
    return full, windowed


def test_window_blocks_and_same_parameters():
    full = tiny(arch=dict(TINY, depths=[2, 1, 0, 3]))
    windowed = tiny(arch=dict(TINY, depths=[2, 1, 0, 3]), window_size=2)
    windows = [b.outer.attn.window_size for stage in windowed.stages for b in stage.blocks]
    assert windows == [2, None, None, 2, 2, None] and windowed.global_blocks == (1, 2, 5)
    assert full.global_blocks == tuple(range(6))
    chosen = tiny(window_size=3, global_blocks=[0, -1])
    assert [b.outer.attn.window_size for s in chosen.stages for b in s.blocks] == [None, 3, 3, None]
    assert tiny(window_size=3, global_blocks=()).global_blocks == ()  # all windowed
    # and back: the windowed model's state dict loads into the global one
    assert full.load_state_dict(windowed.state_dict(), strict=True).missing_keys == []
    assert list(full.state_dict()) == list(windowed.state_dict())


@pytest.mark.parametrize('out_type', ['pyramid', 'cls_token'])
@torch.no_grad()
def test_one_window_over_the_grid_is_the_global_model(out_type):
    """A window that covers the sentence grid (14 x 14 at 224; 4 x 5 and 13 x 14: one window,
    clamped to the grid) is global attention: the same outputs, class token and SE included."""
    arch = dict(TINY, se=True)
    full, _ = windowed_pair(arch=arch, out_type=out_type)
    for window in (14, 20):
        windowed = tiny(arch=arch, out_type=out_type, window_size=window, global_blocks=[1])
        windowed.eval().load_state_dict(full.state_dict(), strict=True)
        for size in ((224, 224), (64, 80), (200, 216)):
            x = torch.randn(2, 3, *size)
            for a, b in zip(windowed(x), full(x)):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # smaller windows do change the outputs (the test above is not vacuous)
    _, small = windowed_pair(arch=arch, out_type=out_type)
    assert (small(x)[-1] - full(x)[-1]).abs().max() > 1e-4


def _masked_reference(attn, x, real, padded, window):
    """Dense attention with the window structure written as a mask: sentence i sees sentence j
    iff both are real and in the same window; every real query sees the class token, which
    sees every real sentence."""
    rows, cols = torch.meshgrid(torch.arange(padded[0]), torch.arange(padded[1]), indexing='ij')
    real_ = ((rows < real[0]) & (cols < real[1])).flatten()
    cell = ((rows // window) * 100 + cols // window).flatten()
    allowed = (cell[:, None] == cell[None]) & real_[:, None] & real_[None]
    allowed = torch.cat([real_[None], allowed], dim=0)  # the class token's row
    allowed = torch.cat([torch.ones(allowed.shape[0], 1, dtype=torch.bool), allowed], dim=1)
    q, k, v = (t.unflatten(-1, (attn.num_heads, -1)).transpose(1, 2)
               for t in attn.qkv(x).chunk(3, dim=-1))
    logits = (q @ k.transpose(-2, -1)) * q.shape[-1]**-0.5
    out = logits.masked_fill(~allowed, float('-inf')).softmax(-1) @ v
    return attn.proj(out.transpose(1, 2).flatten(2))


@pytest.mark.parametrize('real, padded, window', [((3, 5), (3, 5), 2), ((3, 5), (4, 6), 2),
                                                   ((5, 7), (6, 8), 3), ((2, 2), (2, 2), 4)])
@torch.no_grad()
def test_windowed_attention_equals_the_masked_global_one(real, padded, window):
    """Partial windows at odd grids, sentences wholly in padding (size_divisor) excluded."""
    torch.manual_seed(0)
    attn = ClassTokenWindowAttention(DIM, 2, True, window_size=window).eval()
    x = torch.randn(2, 1 + padded[0] * padded[1], DIM)
    rows = torch.arange(padded[0]) < real[0]
    valid = (rows[:, None] & (torch.arange(padded[1]) < real[1])[None]).flatten()
    key_mask = torch.cat([valid.new_ones(1), valid])[None] if real != padded else None
    got = attn(x, key_mask, grid=(real, padded))
    expected = _masked_reference(attn, x, real, padded, window)
    keep = torch.cat([valid.new_ones(1), valid])
    torch.testing.assert_close(got[:, keep], expected[:, keep], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('size', [(200, 328), (33, 47), (1, 1)])
@torch.no_grad()
def test_windowed_model_at_odd_sizes(size):
    full, windowed = windowed_pair()
    x = torch.randn(2, 3, *size)
    outs = windowed(x)
    assert [o.shape for o in outs] == [o.shape for o in full(x)]
    assert [tuple(o.shape[-2:]) for o in outs][-1] == (math.ceil(size[0] / 32),
                                                      math.ceil(size[1] / 32))
    assert all(torch.isfinite(o).all() for o in outs)


@pytest.mark.parametrize('out_type', ['pyramid', 'cls_token'])
@torch.no_grad()
def test_windowed_padding_never_leaks(out_type, monkeypatch):
    """Whole padded sentences (size_divisor=32 at 208 x 240) and the padding of partial windows
    (13 x 15 sentences in windows of 2, filled with large values) change no valid output."""
    torch.manual_seed(0)
    arch = dict(TINY, se=True)
    exact = tiny(arch=arch, out_type=out_type, **WINDOWED).eval()
    padded = tiny(arch=arch, out_type=out_type, size_divisor=32, **WINDOWED).eval()
    padded.load_state_dict(exact.state_dict())
    x = torch.randn(2, 3, 208, 240)
    expected = exact(x)
    for a, b in zip(expected, padded(x)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    calls = poison_padding(monkeypatch)
    for a, b in zip(expected, exact(x)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert calls, 'no window was padded: the test would prove nothing'


def test_windowed_gradients_and_checkpointing():
    torch.manual_seed(0)
    model = tiny(with_cp=True, **WINDOWED).train()
    x = torch.randn(1, 3, 45, 70)
    sum(o.sum() for o in model(x)).backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_bad_window_arguments():
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match='window_size must be a positive int or None'):
            tiny(window_size=bad)
    with pytest.raises(ValueError, match='global_blocks needs window_size'):
        tiny(global_blocks=[0])
    with pytest.raises(TypeError, match='global_blocks must be a sequence of block indices'):
        tiny(window_size=2, global_blocks=3)
    for bad in ([4], [-5], [1, 1], [0, -4]):
        with pytest.raises(ValueError, match=r'must name distinct blocks in 0\.\.3'):
            tiny(window_size=2, global_blocks=bad)
    with pytest.raises(ValueError, match='needs the token grid'):
        ClassTokenWindowAttention(DIM, 2, window_size=2)(torch.randn(1, 5, DIM))


# --- bad configuration ---------------------------------------------------------------------------
def test_bad_configuration():
    with pytest.raises(ValueError, match=r"unknown arch 'huge'.*'base'.*'small'.*'tiny'"):
        TNT('huge')
    with pytest.raises(ValueError, match=r"missing \['num_heads'\]"):
        TNT({k: v for k, v in TINY.items() if k != 'num_heads'})
    with pytest.raises(ValueError, match='not divisible'):
        TNT(dict(TINY, num_heads=3))
    with pytest.raises(ValueError, match='depths must be 4 block counts'):
        TNT(dict(TINY, depths=[0, 0, 0, 0]))
    with pytest.raises(ValueError, match='out_type must be one of'):
        tiny(out_type='tokens')
    with pytest.raises(ValueError, match='size_divisor must be a positive multiple of the patch '
                       'size 16'):
        tiny(size_divisor=24)
    with pytest.raises(ValueError, match='patch_size and word_size must be powers of two'):
        TNT(dict(TINY, patch_size=12))
    with pytest.raises(ValueError, match='patch_size and word_size must be powers of two'):
        TNT(dict(TINY, patch_size=4, word_size=8))
    for flag in ('final_norm', 'legacy', 'word_maps'):
        with pytest.raises(TypeError, match=f'{flag} must be a bool, got 1'):
            tiny(**{flag: 1})
    with pytest.raises(TypeError, match='arch conv_stem must be a bool, got 1'):
        TNT(dict(TINY, conv_stem=1))
    assert TNT('S').arch_name == 'small' and TNT('small').arch_settings['depths'] == [3] * 4
