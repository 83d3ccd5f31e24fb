"""HMHSAPlugin: built by MMCV's build_plugin_layer inside the library ResNets, identity at start,
any input size, and trainable."""
import pytest
import torch
from mmengine.registry import init_default_scope

import mmhvit  # noqa: F401  (registers the plugin)
from mmhvit.models.layers import HMHSA
from mmhvit.models.plugins import HMHSAPlugin
from mmhvit.testing import make_batch

pytestmark = pytest.mark.unit

# A tiny bottleneck ResNet (outputs 32/64/128/256 channels) and a plugin small enough to need
# padded windows and partial pooling cells at the sizes below.
TINY_PLUGIN = dict(grid_size=3, ds_ratio=2, head_dims=8)


def resnet_cfg(resnet_type='ResNet', plugin_type='mmhvit.HMHSAPlugin', **plugin_args):
    cfg = dict(type=resnet_type, depth=50, base_channels=8, out_indices=(0, 1, 2, 3),
               norm_eval=False, init_cfg=None)
    if plugin_type is not None:
        cfg['plugins'] = [dict(cfg=dict(type=plugin_type, **dict(TINY_PLUGIN, **plugin_args)),
                               stages=(False, True, True, True), position='after_conv3')]
    return cfg


def build_resnet(scope='mmdet', **kwargs):
    init_default_scope(scope)
    registry = __import__(f'{scope}.registry', fromlist=['MODELS'])
    model = registry.MODELS.build(resnet_cfg(**kwargs))
    model.init_weights()
    model.eval()  # MMDet's ResNet.train() returns None: no chaining
    return model


def plugins_of(model):
    return [m for m in model.modules() if isinstance(m, HMHSAPlugin)]


@pytest.mark.parametrize('plugin_type', ['mmhvit.HMHSAPlugin', 'HMHSAPlugin'])
@pytest.mark.parametrize('scope,resnet_type', [('mmdet', 'ResNet'), ('mmseg', 'ResNetV1c'),
                                               ('mmpretrain', 'mmdet.ResNet')])
def test_builds_in_library_resnets_from_every_scope(scope, resnet_type, plugin_type):
    model = build_resnet(scope, resnet_type=resnet_type, plugin_type=plugin_type)
    plugins = plugins_of(model)
    assert len(plugins) == 4 + 6 + 3  # every bottleneck of stages 2-4 of ResNet-50
    assert all(isinstance(p.attn, HMHSA) for p in plugins)  # the shared layer, not a copy
    # named by build_plugin_layer from the plugin's abbreviation
    assert isinstance(model.layer2[0].hmhsa_block, HMHSAPlugin)
    assert [p.in_channels for p in (model.layer2[0].hmhsa_block, model.layer4[0].hmhsa_block)] \
        == [64, 256]


def test_builds_in_an_mmpretrain_classifier_config():
    """MMPretrain's own ResNet has no plugins slot; its classifiers take MMDet's ResNet."""
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    backbone = resnet_cfg('mmdet.ResNet', 'HMHSAPlugin')
    backbone['out_indices'] = (3, )
    model = MODELS.build(dict(
        type='ImageClassifier', backbone=backbone, neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=3, in_channels=256)))
    model.init_weights()
    assert len(plugins_of(model)) == 13
    assert model(torch.randn(2, 3, 45, 61), mode='tensor').shape == (2, 3)


@pytest.mark.parametrize('mode', ['official', 'iterative'])
@pytest.mark.parametrize('size', [(67, 45), (33, 97)])
def test_output_shapes_equal_the_plain_resnet_at_odd_sizes(mode, size):
    plain = build_resnet(plugin_type=None)
    model = build_resnet(mode=mode)
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        expected = [o.shape for o in plain(x)]
        outs = model(x)
    assert [o.shape for o in outs] == expected
    assert all(torch.isfinite(o).all() for o in outs)


@pytest.mark.parametrize('ratio', [1 / 4, 1.])  # zero expand conv / zero H-MHSA projection
def test_starts_as_the_pretrained_resnet(ratio, tmp_path):
    """A ResNet with the plugin, loading the plain ResNet's weights through init_cfg (as a
    detector loads torchvision's), gives exactly the plain ResNet's outputs."""
    torch.manual_seed(0)
    plain = build_resnet(plugin_type=None)
    for m in plain.modules():  # non-trivial BN statistics and affine parameters
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-.5, .5)
            m.running_var.uniform_(.5, 2)
            m.weight.data.uniform_(.5, 1.5)
            m.bias.data.uniform_(-.5, .5)
    checkpoint = tmp_path / 'plain.pth'
    torch.save(dict(state_dict=plain.state_dict()), checkpoint)

    init_default_scope('mmdet')
    from mmdet.registry import MODELS
    cfg = resnet_cfg(ratio=ratio, head_dims=16)
    cfg['init_cfg'] = dict(type='Pretrained', checkpoint=str(checkpoint))
    model = MODELS.build(cfg)
    model.init_weights()  # ResNet's Kaiming init of every Conv2d runs before the plugin's init
    model.eval()
    for plugin in plugins_of(model):
        assert not plugin.last_layer.weight.any() and not plugin.last_layer.bias.any()
        assert plugin.attn.qkv.weight.any()  # only the last map starts at zero
    x = torch.randn(2, 3, 53, 70)
    with torch.no_grad():
        for out, expected in zip(model(x), plain(x)):
            assert torch.equal(out, expected)


def test_training_step_reaches_the_plugin():
    """RetinaNet with the plugin ResNet: finite losses; step 1 trains the zero map, after which
    the gradients reach every plugin parameter and the plugin changes the features."""
    from conftest import REPO
    from mmdet.registry import MODELS
    from mmengine.config import Config
    init_default_scope('mmdet')
    cfg = Config.fromfile(f'{REPO}/configs/quickstart/retinanet_r50-w16-hmhsa_16e_shapes.py')
    # From scratch, MMDet's ResNet zero-initialises bn3, the plugin's input at after_conv3, so the
    # plugin would first see a non-zero map at step 2; pretrained weights (the use case) do not.
    cfg.model.backbone.update(base_channels=8, zero_init_residual=False)
    cfg.model.backbone.plugins[0].cfg.update(TINY_PLUGIN)
    cfg.model.neck.in_channels = [64, 128, 256]
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    plugins = plugins_of(model.backbone)
    for step in range(2):
        data = model.data_preprocessor(make_batch('mmdet', cfg, 64, 96), True)
        loss, _ = model.parse_losses(model(**data, mode='loss'))
        assert torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        for plugin in plugins:
            assert plugin.last_layer.weight.grad.abs().sum() > 0
            if step == 1:
                dead = [n for n, p in plugin.named_parameters() if not p.grad.abs().sum() > 0]
                assert not dead, dead
        optimizer.step()
    assert all(p.last_layer.weight.any() for p in plugins)
    x = torch.randn(1, 64, 9, 11)
    plugins[0].eval()
    assert not torch.allclose(plugins[0](x), x)


def test_plugin_equals_its_hmhsa_branch():
    plugin = HMHSAPlugin(32, ratio=1 / 2, grid_size=4, ds_ratio=2, num_heads=2)
    torch.nn.init.normal_(plugin.expand.weight)
    plugin.eval()
    x = torch.randn(2, 32, 13, 10)
    expected = x + plugin.expand(plugin.attn(plugin.reduce(x)))
    assert torch.allclose(plugin(x), expected)
    assert plugin.attn.num_heads == 2 and plugin.attn.grid_size == 4 and plugin.attn.ds_ratio == 2


@pytest.mark.parametrize('kwargs,message', [
    (dict(mode='global'), 'mode must be one of'),
    (dict(grid_size=0), 'grid_size must be an integer >= 1'),
    (dict(ds_ratio=1.5), 'ds_ratio must be an integer >= 1'),
    (dict(ratio=0), r'ratio must be in \(0, 1\]'),
    (dict(num_heads=3), 'num_heads must be >= 1 and divide'),
])
def test_bad_arguments_raise_one_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HMHSAPlugin(64, **kwargs)


def test_default_heads_and_norm():
    plugin = HMHSAPlugin(1024)  # ResNet-50 stage 3 after conv3: 256 attention channels
    assert plugin.embed_dims == 256 and plugin.attn.num_heads == 4
    assert type(plugin.attn.norm).__name__ == 'LayerNorm2d'
    small = HMHSAPlugin(128)  # 32 channels, fewer than one 64-channel head: one head
    assert small.attn.num_heads == 1
    assert small.reduce.out_channels == 32
