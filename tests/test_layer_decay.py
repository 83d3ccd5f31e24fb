"""LayerDecayOptimWrapperConstructor: which parameter gets which learning rate."""
import pytest
import torch.nn as nn
from mmengine.registry import MODELS

import mmhvit  # noqa: F401  (registers the backbones and the constructor)
from mmhvit.engine import LayerDecayOptimWrapperConstructor
from mmhvit.testing import TINY_ARCHS

pytestmark = pytest.mark.unit

RATE = 0.5
BASE_LR = 1.0


class Detector(nn.Module):
    """A backbone and a neck, as mmdet / mmseg / mmpretrain models hold them."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.neck = nn.Linear(4, 4)


def build_optimizer(model, **paramwise):
    constructor = LayerDecayOptimWrapperConstructor(
        dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=BASE_LR, weight_decay=0.05)),
        dict(layer_decay_rate=RATE, **paramwise))
    return constructor(model).optimizer


def lr_of(optimizer, model):
    names = {id(p): n for n, p in model.named_parameters()}
    lrs = {}
    for group in optimizer.param_groups:
        for param in group['params']:
            assert names[id(param)] not in lrs, 'a parameter in two groups'
            lrs[names[id(param)]] = group['lr']
    return lrs


@pytest.mark.parametrize('name', sorted(TINY_ARCHS))
def test_backbone_lrs_decay_with_depth(name):
    arch = dict(TINY_ARCHS[name]['arch'], depths=[2, 1, 1, 1])
    backbone = MODELS.build(dict(TINY_ARCHS[name], type=f'mmhvit.{name}', arch=arch))
    model = Detector(backbone)
    lrs = lr_of(build_optimizer(model), model)
    assert set(lrs) == {n for n, _ in model.named_parameters()}
    blocks = 5
    # The stem gets the smallest rate, block j (1-based, forward order) rate ** (N + 1 - j).
    stem = [lr for n, lr in lrs.items() if n.startswith('backbone.patch_embed.')]
    assert stem and all(lr == pytest.approx(RATE**(blocks + 1)) for lr in stem)
    order = [(0, 0), (0, 1), (1, 0), (2, 0), (3, 0)]
    for layer, (stage, block) in enumerate(order, start=1):
        prefix = f'backbone.stages.{stage}.blocks.{block}.'
        found = [lr for n, lr in lrs.items() if n.startswith(prefix)]
        assert found, prefix
        assert all(lr == pytest.approx(RATE**(blocks + 1 - layer)) for lr in found), prefix
    # The neck keeps the base rate; nothing in the backbone exceeds it.
    assert lrs['neck.weight'] == lrs['neck.bias'] == BASE_LR
    assert max(lr for n, lr in lrs.items() if n.startswith('backbone.')) <= BASE_LR


def test_tnt_pieces_around_the_blocks():
    """Output norms / rescaling after the blocks are read by the neck (layer N + 1, the full
    rate); position and class tokens belong to the stem."""
    backbone = MODELS.build(dict(TINY_ARCHS['TNT'], type='mmhvit.TNT'))
    model = Detector(backbone)
    lrs = lr_of(build_optimizer(model), model)
    assert lrs['backbone.patch_embed.pos_embed'] == pytest.approx(RATE**5)
    assert lrs['backbone.patch_embed.cls_token'] == pytest.approx(RATE**5)
    assert lrs['backbone.stages.0.out_norm.weight'] == BASE_LR
    out_proj = [lr for n, lr in lrs.items() if n.startswith('backbone.stages.0.out_proj.')]
    assert out_proj and set(out_proj) == {BASE_LR}


def test_resnet18_from_each_library():
    from mmdet.models.backbones import ResNet as DetResNet
    from mmpretrain.models.backbones import ResNet as ClsResNet
    from mmseg.models.backbones import ResNet as SegResNet
    for resnet in (DetResNet, SegResNet, ClsResNet):
        model = Detector(resnet(depth=18))
        lrs = lr_of(build_optimizer(model), model)
        # 8 residual blocks: the stem is layer 0, layer1.0 is layer 1, layer4.1 layer 8.
        assert lrs['backbone.conv1.weight'] == pytest.approx(RATE**9), resnet
        assert lrs['backbone.layer1.0.conv1.weight'] == pytest.approx(RATE**8)
        assert lrs['backbone.layer2.1.conv2.weight'] == pytest.approx(RATE**5)
        assert lrs['backbone.layer4.1.conv2.weight'] == pytest.approx(RATE**1)
        assert lrs['neck.weight'] == BASE_LR


def test_other_paramwise_options_still_apply():
    backbone = MODELS.build(dict(TINY_ARCHS['NesT'], type='mmhvit.NesT'))
    model = Detector(backbone)
    optimizer = build_optimizer(model, norm_decay_mult=0., custom_keys={'neck': dict(lr_mult=3)})
    names = {id(p): n for n, p in model.named_parameters()}
    groups = {names[id(g['params'][0])]: g for g in optimizer.param_groups}
    norm = next(n for n in groups if '.norm' in n and n.endswith('.weight'))
    assert groups[norm]['weight_decay'] == 0.
    assert groups['neck.weight']['lr'] == 3 * BASE_LR
    assert groups['neck.weight']['weight_decay'] == 0.05


@pytest.mark.parametrize('scope', ['mmdet', 'mmseg', 'mmpretrain'])
def test_builds_from_every_library_registry(scope):
    import importlib
    registry = importlib.import_module(f'{scope}.registry').OPTIM_WRAPPER_CONSTRUCTORS
    constructor = registry.build(dict(
        type='LayerDecayOptimWrapperConstructor',
        optim_wrapper_cfg=dict(type='OptimWrapper', optimizer=dict(type='SGD', lr=0.1)),
        paramwise_cfg=dict(layer_decay_rate=0.9)))
    assert isinstance(constructor, LayerDecayOptimWrapperConstructor)


@pytest.mark.parametrize('rate', [None, 0, 1.5, True, '0.9'])
def test_bad_rate(rate):
    paramwise = {} if rate is None else dict(layer_decay_rate=rate)
    with pytest.raises(ValueError, match=r'layer_decay_rate, a number in \(0, 1\]'):
        LayerDecayOptimWrapperConstructor(
            dict(type='OptimWrapper', optimizer=dict(type='SGD', lr=0.1)), paramwise)


def test_unknown_backbone_or_no_backbone():
    with pytest.raises(TypeError, match='does not know the depth order of Linear'):
        build_optimizer(Detector(nn.Linear(2, 2)))
    with pytest.raises(TypeError, match='needs a model with a backbone'):
        build_optimizer(nn.Linear(2, 2))
