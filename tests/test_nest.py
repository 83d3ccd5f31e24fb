"""NesT: equivalence with timm (official weights), padding, position embeddings, tools, GradCAT
(the contract shared by all backbones is in test_backbone_contract.py)."""
import functools
import os.path as osp

import pytest
import timm
import torch
import torch.nn.functional as F
from conftest import REPO, run_tool, tool_env

from mmhvit.analysis.gradcat import block_scores, classifier_gradcat, draw_gradcat, nest_gradcat
from mmhvit.models.backbones.nest import NesT
from mmhvit.models.converters import convert_nest_checkpoint, describe_nest_checkpoint
from mmhvit.models.layers import blocks_to_map, map_to_blocks
from mmhvit.testing import timm_nest, tiny_arch

pytestmark = pytest.mark.unit
# The tiny arch (4-token blocks, pre-trained at 64) with two blocks at level 1 and no stride-32
# level (timm's three levels): every level has several blocks.
ARCH4 = tiny_arch('NesT', depths=[1, 2, 1, 0])
DIMS = ARCH4['embed_dims']


def tiny_nest(**kwargs):
    kwargs.setdefault('arch', ARCH4)
    kwargs.setdefault('pretrain_img_size', 64)
    return NesT(**kwargs)


# --- equivalence with timm at the real size -------------------------------------------------------
@functools.lru_cache(maxsize=None)
def timm_tiny(name):
    """A randomly initialised timm NesT-T, its features_only maps and logits at 224 (built once)."""
    torch.manual_seed(0)
    ref = timm.create_model(name, pretrained=False).eval()
    feats = timm.create_model(name, pretrained=False, features_only=True).eval()
    state_dict = ref.state_dict()
    feats.load_state_dict({
        k.replace('levels.', 'levels_'): v
        for k, v in state_dict.items() if not k.startswith(('head.', 'norm.'))
    })
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        logits, maps = ref(x), feats(x)
    return dict(state_dict=state_dict, x=x, logits=logits, maps=maps)


@pytest.mark.parametrize('name, padding', [('nest_tiny_jx', 'same'), ('nest_tiny', 'symmetric')])
def test_timm_equivalence_logits_and_maps(name, padding):
    reference = timm_tiny(name)
    state_dict = reference['state_dict']
    # classifier: backbone (final LN on the stride-16 output) + mean + timm's head
    model = NesT('tiny', out_indices=(2, ), pool_padding=padding).eval()
    converted = convert_nest_checkpoint(state_dict, num_heads=model.arch_settings['num_heads'])
    model.load_state_dict(converted, strict=True)
    with torch.no_grad():
        pooled = model(reference['x'])[0].mean(dim=(2, 3))
        logits = F.linear(pooled, state_dict['head.weight'], state_dict['head.bias'])
    torch.testing.assert_close(logits, reference['logits'], atol=1e-4, rtol=0)

    # stride 4/8/16 maps equal timm's features_only maps (which come before the final LN)
    model = NesT('tiny', out_indices=(0, 1, 2), final_norm=False,
                 pool_padding=padding).eval()
    result = model.load_state_dict(converted, strict=False)
    assert not result.missing_keys
    assert result.unexpected_keys == ['stages.2.out_norm.weight', 'stages.2.out_norm.bias']
    with torch.no_grad():
        maps = model(reference['x'])
    assert len(maps) == 3
    for ours, ref in zip(maps, reference['maps']):
        assert ours.shape == ref.shape
        torch.testing.assert_close(ours, ref, atol=1e-4, rtol=0)

    # the padding option matters: the other one gives other maps
    other = 'symmetric' if padding == 'same' else 'same'
    model = NesT('tiny', out_indices=(1, ), final_norm=False, pool_padding=other).eval()
    model.load_state_dict(converted, strict=False)
    with torch.no_grad():
        assert (model(reference['x'])[0] - reference['maps'][1]).abs().max() > 1e-3


@pytest.mark.slow
def test_classifier_checkpoint_from_converter_cli(tmp_path):
    """nest2mmhvit.py writes a checkpoint that the ImageNet config loads; logits equal timm's."""
    reference = timm_tiny('nest_tiny_jx')
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import load_checkpoint
    from safetensors.torch import save_file

    src, dst = tmp_path / 'nest_tiny_jx.safetensors', tmp_path / 'nest_t_in1k.pth'
    save_file({k: v.contiguous() for k, v in reference['state_dict'].items()}, str(src))
    run_tool('tools/model_converters/nest2mmhvit.py', str(src), str(dst), env=tool_env())
    checkpoint = torch.load(dst, map_location='cpu', weights_only=True)
    assert checkpoint['meta']['arch'] == 'tiny'

    cfg = Config.fromfile(osp.join(REPO, 'configs/nest_t_in1k.py'))
    init_default_scope('mmpretrain')
    from mmpretrain.registry import MODELS
    classifier = MODELS.build(cfg.model).eval()
    load_checkpoint(classifier, str(dst), map_location='cpu', strict=True)
    with torch.no_grad():
        logits = classifier(reference['x'], mode='tensor')
    torch.testing.assert_close(logits, reference['logits'], atol=1e-4, rtol=0)
    # the same file initialises a detection-style backbone through init_cfg with a prefix
    backbone = NesT('tiny', out_indices=(1, 2), init_cfg=dict(
        type='Pretrained', checkpoint=str(dst), prefix='backbone.'))
    backbone.init_weights()
    with torch.no_grad():
        torch.testing.assert_close(backbone.eval()(reference['x'])[0], reference['maps'][1],
                                   atol=1e-4, rtol=0)
    assert cfg.optim_wrapper.optimizer.lr == 2.5e-4
    assert cfg.optim_wrapper.optimizer.weight_decay == 0.05
    assert cfg.train_cfg.max_epochs == 300


def test_param_counts_equal_timm():
    """With a 1000-class head: timm's nest_{tiny,small,base}_jx counts (17.06 / 38.35 / 67.72 M)."""
    timm_counts = dict(tiny=17057608, small=38351176, base=67723368)
    for arch, expected in timm_counts.items():
        with torch.device('meta'):
            model = NesT(arch, out_indices=(2, ))
        dim = model.stage_channels[2]
        count = sum(p.numel() for p in model.parameters()) + dim * 1000 + 1000
        assert count == expected, arch
    # the stride-32 output adds one aggregation (conv3x3 384 -> 768 + LN) that no checkpoint has
    with torch.device('meta'):
        model = NesT('tiny', out_indices=(3, ))
    extra = sum(p.numel() for p in model.stages[3].parameters())
    assert extra == 384 * 768 * 9 + 768 + 2 * 768


# --- any input size ----------------------------------------------------------------------------
def test_padding_never_leaks():
    """Valid outputs of every level equal a per-block computation without the padded tokens."""
    torch.manual_seed(0)
    model = tiny_nest(arch=dict(ARCH4, depths=[1, 2, 1, 1])).eval()
    x = torch.randn(2, 3, 44, 60)  # tokens 11x15 -> 6x8 -> 3x4 -> 2x2: partial blocks everywhere
    inputs, outputs = {}, {}
    for i, level in enumerate(model.stages):
        level.register_forward_pre_hook(lambda m, a, i=i: inputs.__setitem__(i, a[0]))
        level.register_forward_hook(lambda m, a, o, i=i: outputs.__setitem__(i, o))
    with torch.no_grad():
        model(x)
        padded_levels = 0
        for i, level in enumerate(model.stages):
            feat = level.downsample(inputs[i]) if level.downsample else inputs[i]
            height, width = feat.shape[-2:]
            tokens = feat.permute(0, 2, 3, 1) + level.pos_map((height, width))
            padded_levels += bool(height % model.block_size or width % model.block_size)
            expected = torch.empty_like(tokens)
            for top in range(0, height, model.block_size):
                for left in range(0, width, model.block_size):
                    block = tokens[:, top:top + model.block_size, left:left + model.block_size]
                    seq = block.reshape(block.shape[0], -1, block.shape[-1])
                    for layer in level.blocks:
                        seq = layer(seq)  # only the valid tokens: padded keys are absent
                    expected[:, top:top + model.block_size,
                             left:left + model.block_size] = seq.view(block.shape)
            torch.testing.assert_close(outputs[i], expected.permute(0, 3, 1, 2), atol=1e-5,
                                       rtol=1e-5)
        assert padded_levels == 4

        # the check is sensitive: attending to the padded tokens changes a valid output
        level = model.stages[0]
        tokens = F.pad(outputs[0][:1, :, :3, :3].permute(0, 2, 3, 1), (0, 0, 0, 1, 0, 1))
        seq = tokens.reshape(1, 16, -1)
        valid = tokens[:, :3, :3].reshape(1, 9, -1)
        assert (level.blocks[0](seq).view(tokens.shape)[:, :3, :3] -
                level.blocks[0](valid).view(1, 3, 3, -1)).abs().max() > 1e-3


def test_pos_embed_resized_at_runtime_and_on_load(tmp_path):
    """A model pre-trained at 64 run at 128 equals a model built for 128 that loaded it."""
    torch.manual_seed(0)
    arch = dict(ARCH4, depths=[1, 2, 1, 1])
    small = tiny_nest(arch=arch).eval()
    small.init_weights()
    ckpt = tmp_path / 'nest64.pth'
    torch.save(small.state_dict(), ckpt)
    big = tiny_nest(arch=arch, pretrain_img_size=128,
                    init_cfg=dict(type='Pretrained', checkpoint=str(ckpt)))
    assert big.stages[0].pos_embed.shape == (1, 64, 16, DIMS[0])  # 8x8 blocks of 4x4 at 128
    big.init_weights()
    big.eval()
    # the loaded embedding is the old one read as a map, resized, and re-blocked
    old_map = blocks_to_map(small.stages[0].pos_embed.detach(), small.stages[0].pos_layout)
    resized = F.interpolate(old_map, size=(32, 32), mode='bicubic', align_corners=False)
    torch.testing.assert_close(big.stages[0].pos_embed.detach(),
                               map_to_blocks(resized, big.stages[0].pos_layout))
    torch.testing.assert_close(big.stages[1].blocks[1].mlp.fc1.weight,
                               small.stages[1].blocks[1].mlp.fc1.weight)
    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        for a, b in zip(small(x), big(x)):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_timm_layout_checkpoint_loads_through_init_cfg(tmp_path):
    """A small timm Nest (.safetensors and .pth) loads via init_cfg and gives timm's level maps."""
    from safetensors.torch import save_file
    ref = timm_nest(ARCH4, pad_type='same')
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        ref_maps, y = [], ref.patch_embed(x)
        for level in ref.levels:
            y = level(y)
            ref_maps.append(y)
        ref_maps[-1] = ref.norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    pth, safe = tmp_path / 'nest.pth', tmp_path / 'nest.safetensors'
    torch.save(dict(state_dict=ref.state_dict()), pth)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(safe))
    for ckpt in (pth, safe):
        model = tiny_nest(out_indices=(0, 1, 2), pretrained=str(ckpt))
        model.init_weights()
        model.eval()
        with torch.no_grad():
            for ours, theirs in zip(model(x), ref_maps):
                torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    # own keys pass through the converter unchanged
    own = model.state_dict()
    assert list(convert_nest_checkpoint(own, num_heads=model.arch_settings['num_heads'])) == \
        list(own)
    assert describe_nest_checkpoint(ref.state_dict(), NesT) == \
        f'custom(dims={DIMS[:3]}, depths=[1, 2, 1])'


def test_bad_arch_and_checkpoint_of_another_arch(tmp_path):
    with pytest.raises(ValueError, match=r"unknown arch 'huge'.*'base'.*'small'.*'tiny'"):
        NesT('huge')
    with pytest.raises(ValueError, match=r"missing \['num_heads'\]"):
        NesT(dict(embed_dims=[8, 16, 32, 64], depths=[1, 1, 1, 0]))
    with pytest.raises(ValueError, match='4 values'):
        NesT(dict(embed_dims=[8, 16], depths=[1, 1], num_heads=[1, 1]))
    with pytest.raises(ValueError, match='pool_padding'):
        tiny_nest(pool_padding='reflect')
    with pytest.raises(ValueError, match='multiples of 64'):
        tiny_nest(pretrain_img_size=96)

    # a checkpoint of another arch: one error naming both
    ckpt = tmp_path / 'other.pth'
    torch.save(NesT(dict(ARCH4, embed_dims=[16, 32, 64, 128]), pretrain_img_size=64).state_dict(),
               ckpt)
    model = tiny_nest(init_cfg=dict(type='Pretrained', checkpoint=str(ckpt)))
    with pytest.raises(ValueError, match=r'made for NesT arch custom\(dims=\[16, 32, 64\].*'
                       r'this model is arch custom \{.*8, 16, 32'):
        model.init_weights()


# --- GradCAT ---------------------------------------------------------------------------------
def _tiny_classifier(num_classes=5):
    torch.manual_seed(0)
    backbone = tiny_nest(out_indices=(2, )).eval()
    head = torch.nn.Linear(DIMS[2], num_classes)
    return backbone, lambda x: head(backbone(x)[0].mean(dim=(2, 3)))


def test_gradcat_path(tmp_path):
    from PIL import Image
    backbone, logits_fn = _tiny_classifier()
    image = torch.randn(1, 3, 72, 100)  # tokens 18x25 (5x7 blocks), 9x13 (3x4), 5x7 (2x2)
    result = nest_gradcat(backbone, logits_fn, image)
    with torch.no_grad():
        assert result['target_class'] == int(logits_fn(image)[0].argmax())
    path = result['path']
    assert [node['level'] for node in path] == [2, 1, 0]
    for parent, child in zip(path, path[1:]):
        px0, py0, px1, py1 = parent['box']
        cx0, cy0, cx1, cy1 = child['box']
        assert px0 <= cx0 < cx1 <= px1 and py0 <= cy0 < cy1 <= py1
        (pr, pc), (cr, cc) = parent['block'], child['block']
        assert cr // 2 == pr and cc // 2 == pc  # one of the parent's 2x2 children

    # the top choice is the block with the highest gradient x activation, computed here directly
    maps = {}
    hook = backbone.stages[2].register_forward_hook(lambda m, a, o: maps.__setitem__(2, o))
    logits = logits_fn(image)
    hook.remove()
    grad, = torch.autograd.grad(logits[0, result['target_class']], maps[2])
    scores = (grad * maps[2]).sum(dim=1)[0]
    blocks = {(r, c): scores[4 * r:4 * r + 4, 4 * c:4 * c + 4].sum().item()
              for r in range(2) for c in range(2)}
    assert path[0]['block'] == max(blocks, key=blocks.get)
    assert path[0]['score'] == pytest.approx(blocks[path[0]['block']], rel=1e-4, abs=1e-6)
    assert block_scores(scores.detach(), 4).shape == (2, 2)

    # another target class is honoured; bad ones are refused
    assert nest_gradcat(backbone, logits_fn, image, target_class=3)['target_class'] == 3
    with pytest.raises(ValueError, match='outside 0..4'):
        nest_gradcat(backbone, logits_fn, image, target_class=7)

    out = tmp_path / 'gradcat.png'
    draw_gradcat(Image.new('RGB', (100, 72), (128, 128, 128)), path, str(out))
    drawn = Image.open(out)
    assert drawn.format == 'PNG' and drawn.size == (100, 72)
    x0, y0 = path[-1]['box'][:2]
    assert drawn.getpixel((x0, y0)) != (128, 128, 128)


def test_gradcat_tool(tmp_path):
    import numpy as np
    from mmengine.registry import init_default_scope
    from PIL import Image

    config = tmp_path / 'nest_tiny_cls.py'
    config.write_text(
        "custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)\n"
        "default_scope = 'mmpretrain'\n"
        f"model = dict(type='ImageClassifier', backbone=dict(type='mmhvit.NesT', arch={ARCH4!r}, "
        "pretrain_img_size=64, out_indices=(2, )), neck=dict(type='GlobalAveragePooling'), "
        f"head=dict(type='LinearClsHead', num_classes=5, in_channels={DIMS[2]}))\n")
    init_default_scope('mmpretrain')
    from mmengine.config import Config
    from mmpretrain.registry import MODELS
    torch.manual_seed(0)
    classifier = MODELS.build(Config.fromfile(str(config)).model)
    ckpt = tmp_path / 'cls.pth'
    torch.save(dict(state_dict=classifier.state_dict()), ckpt)
    ramp = np.linspace(0, 255, 90 * 70 * 3).reshape(70, 90, 3).astype(np.uint8)
    image = tmp_path / 'image.png'
    Image.fromarray(ramp).save(image)

    # what tools/analysis_tools/nest_gradcat.py runs
    out = tmp_path / 'path.png'
    result, resized = classifier_gradcat(str(config), str(ckpt), str(image), (72, 100),
                                         target_class=2)
    draw_gradcat(resized, result['path'], str(out))
    assert result['target_class'] == 2 and len(result['path']) == 3
    assert Image.open(out).size == (100, 72)
