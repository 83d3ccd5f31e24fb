"""Every shipped config loads, builds (no download) and takes one loss and one predict step."""
import glob
import os.path as osp
import re

import pytest
import torch
from conftest import REPO
from mmengine.config import Config
from mmengine.model import revert_sync_batchnorm
from mmengine.registry import init_default_scope

from mmhvit.testing import TINY_ARCHS, make_batch

pytestmark = pytest.mark.integration

SHIPPED = sorted(
    osp.relpath(p, REPO) for p in glob.glob(osp.join(REPO, 'configs', '**', '*.py'), recursive=True)
    if not osp.basename(p).startswith('_'))
CONFIGS = [
    c for c in SHIPPED
    # The sharded large variants (60-160 M parameters) are their base configs' recipes (stepped
    # here) with a bigger arch: test_distributed.py builds them on the meta device. The configs
    # on Swin's detector recipes are stepped from their own data pipelines, with tiny archs, in
    # test_swin_recipe_configs.py.
    if '_fsdp_' not in osp.basename(c) and not (
        osp.dirname(c) == 'configs'
        and osp.basename(c).startswith(('cascade-mask-rcnn_', 'dino-', 'mask2former_')))]


def input_size(scope, cfg):
    if scope == 'mmpretrain' and 'quickstart' in cfg.filename:
        return (96, 96)  # the shapes crops
    if scope == 'mmpretrain':  # the official resolutions
        return (256, 256) if cfg.model.backbone.type in ('mmhvit.TransCNN',
                                                         'mmhvit.PyramidTNT') else (224, 224)
    return (128, 160)  # small, not square, not a multiple of the backbones' windows


@pytest.mark.parametrize('config', CONFIGS)
def test_config_builds_and_steps(config):
    cfg = Config.fromfile(osp.join(REPO, config))
    assert cfg.custom_imports == dict(imports=['mmhvit'], allow_failed_imports=False)
    scope = cfg.default_scope
    # The library's ResNet: the quickstart baselines (r18, r50-w16) and the H-MHSA plugin configs
    baseline = re.search(r'_r\d+', osp.basename(config)) is not None
    # ... and a library ViT as the TNT ablation's plain-transformer reference
    reference = {'ResNet'} if baseline else {'VisionTransformer'} if '_vit-' in config else None
    assert cfg.model.backbone.type in reference if reference else \
        cfg.model.backbone.type.startswith('mmhvit.')
    if 'hmhsa' in osp.basename(config):
        assert [p.cfg.type for p in cfg.model.backbone.plugins] == ['mmhvit.HMHSAPlugin']
    import mmhvit  # noqa: F401  (what custom_imports does)
    init_default_scope(scope)
    registry = __import__(f'{scope}.registry', fromlist=['MODELS'])
    cfg.model.backbone.pop('init_cfg', None)  # no download in tests
    cfg.model.pop('init_cfg', None)
    if 'data_preprocessor' in cfg:  # as the Runner does
        cfg.model.setdefault('data_preprocessor', cfg.data_preprocessor)
    height, width = input_size(scope, cfg)
    if scope == 'mmseg' and cfg.model.data_preprocessor.get('size'):
        # The ADE20K recipes pad every batch to their 512 x 512 crop: the small test batch stays
        # small (the padding is MMSeg's, not ours to test), which keeps this test seconds long.
        cfg.model.data_preprocessor.size = (height, width)
    model = revert_sync_batchnorm(registry.MODELS.build(cfg.model))
    model.init_weights()

    data = model.data_preprocessor(make_batch(scope, cfg, height, width), True)
    model.train()
    losses = model(**data, mode='loss')
    loss, _ = model.parse_losses(losses)
    assert torch.isfinite(loss)
    loss.backward()
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    if scope == 'mmdet' and 'rpn_head' not in cfg.model:
        # RetinaNet: the neck is wired to the outputs it uses (DDP needs every parameter used)
        assert not unused, unused
    if 'quickstart' in config:
        # No dead level: every parameter of our backbones that trains gets a non-zero gradient
        # (ResNet's zero-initialised residual BNs stop it for one step on purpose: there, every
        # parameter gets a gradient).
        dead = [n for n, p in model.backbone.named_parameters()
                if p.requires_grad and (p.grad is None or not (baseline or p.grad.any()))]
        assert not dead, dead

    model.eval()
    with torch.no_grad():
        data = model.data_preprocessor(make_batch(scope, cfg, height, width), False)
        predictions = model(**data, mode='predict')
    assert len(predictions) == 2
    if scope == 'mmdet':
        assert 'bboxes' in predictions[0].pred_instances
    elif scope == 'mmseg':
        assert predictions[0].pred_sem_seg.data.shape[-2:] == (height, width)
    else:
        assert predictions[0].pred_score.shape == (cfg.model.head.num_classes, )


@pytest.mark.parametrize('name', sorted(TINY_ARCHS))
def test_backbone_drops_into_mmdet_shipped_retinanet(name):
    """What a user does: mmdet's own config + custom_imports + a backbone override."""
    import mmdet
    from mmdet.registry import MODELS

    import mmhvit  # noqa: F401
    init_default_scope('mmdet')
    cfg = Config.fromfile(osp.join(osp.dirname(mmdet.__file__), '.mim', 'configs', 'retinanet',
                                   'retinanet_r50_fpn_1x_coco.py'))
    backbone = MODELS.build(dict(type=f'mmhvit.{name}', **TINY_ARCHS[name]))
    channels = [f.shape[1] for f in backbone(torch.randn(1, 3, 64, 64))]
    cfg.merge_from_dict(dict(
        custom_imports=dict(imports=['mmhvit'], allow_failed_imports=False),
        model=dict(backbone=dict(_delete_=True, type=f'mmhvit.{name}', **TINY_ARCHS[name]),
                   neck=dict(in_channels=channels))))
    model = MODELS.build(cfg.model)
    data = model.data_preprocessor(make_batch('mmdet', cfg, 128, 160), True)
    losses = model(**data, mode='loss')
    assert torch.isfinite(model.parse_losses(losses)[0])


def test_model_index_lists_every_top_level_config():
    import yaml
    index = yaml.safe_load(open(osp.join(REPO, 'model-index.yml')))
    listed = set()
    for meta in index['Import']:
        listed |= {m['Config'] for m in yaml.safe_load(open(osp.join(REPO, meta)))['Models']}
    top_level = {c for c in SHIPPED if osp.dirname(c) == 'configs' and '_fsdp_' not in c}
    assert listed == top_level
