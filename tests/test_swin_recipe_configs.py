"""The configs on Swin's detector recipes (issue 45): Cascade Mask R-CNN 3x, DINO 4-scale,
Mask2Former on COCO panoptic / instances and on ADE20K, for each family's COCO-size variant.

Each config builds under ``custom_imports`` only; its per-parameter settings do what Swin's do,
in our parameter names (checked on the full-size model, built on the meta device); its training
data pipeline reads a tiny COCO / ADE20K tree made here; and its model takes one training step
with the recipe's optimizer on a batch from its own dataloader. The step uses the family's tiny
arch and the pipeline's sizes divided by 8 (the detector, heads, transforms and optimizer are
the config's): full-size backbones at 800-1333 px on CPU would take minutes per config.
"""
import copy
import glob
import json
import logging
import os.path as osp

import numpy as np
import pytest
import torch
from conftest import REPO
from mmengine.config import Config
from mmengine.model import revert_sync_batchnorm
from mmengine.optim import build_optim_wrapper
from mmengine.registry import init_default_scope
from mmengine.runner import Runner, set_random_seed
from torch import nn
from torch.nn.modules.batchnorm import _NormBase

from mmhvit.testing import TINY_ARCHS

pytestmark = pytest.mark.integration

FAMILIES = {'transcnn_b': 'TransCNN', 'hatnet_s': 'HATNet', 'nest_t': 'NesT', 'tnt_s': 'TNT',
            'ptnt_s': 'PyramidTNT'}
NAMES = ('cascade-mask-rcnn_{}_fpn_ms-crop-3x_coco.py', 'dino-4scale_{}_12e_coco.py',
         'mask2former_{}_lsj-50e_coco-panoptic.py', 'mask2former_{}_lsj-50e_coco.py',
         'mask2former_{}_160k_ade20k-512x512.py')
CONFIGS = [name.format(family) for family in FAMILIES for name in NAMES]
# The recipes' own keys (mmdet's / mmseg's DINO and Mask2Former), not ours
RECIPE_KEYS = {'backbone', 'query_embed', 'query_feat', 'level_embed'}
# Our position tables, the counterparts of Swin's absolute_pos_embed and
# relative_position_bias_table (and TNT's class token, which its configs exempt as well)
TABLES = {'pos_embed', 'word_pos_embed', 'relative_pos', 'cls_token'}
SHRINK = 8


def family_of(config):
    return next(f for f in FAMILIES if f'_{f}_' in config)


def test_every_detector_of_the_issue_ships_for_every_family():
    shipped = {osp.basename(p) for p in glob.glob(osp.join(REPO, 'configs', '*.py'))
               if osp.basename(p).startswith(('cascade-mask-rcnn_', 'dino-', 'mask2former_'))}
    assert shipped == set(CONFIGS)


# ----------------------------------------------------------------------------------------------
# The tiny trees: two 96 x 128 images with a person and a car (COCO instances and panoptic, with a
# sky segment) and two ADE20K images with a label map.
def _image(seed):
    return np.random.default_rng(seed).integers(0, 256, (96, 128, 3), dtype=np.uint8)


def _coco_tree(root):
    import mmcv
    boxes = {1: [8, 10, 40, 50], 3: [60, 30, 50, 40]}  # category id: x, y, w, h
    images, instances, panoptic = [], [], []
    for image_id in (1, 2):
        name = f'{image_id:012d}'
        mmcv.imwrite(_image(image_id), f'{root}/train2017/{name}.jpg')
        images.append(dict(id=image_id, file_name=f'{name}.jpg', height=96, width=128))
        ids = np.full((96, 128), 3, dtype=np.uint32)  # segment 3: sky, the rest of the image
        segments = [dict(id=3, category_id=187, iscrowd=0, bbox=[0, 0, 128, 96], area=0)]
        for segment_id, (category, (x, y, w, h)) in enumerate(boxes.items(), 1):
            polygon = [x, y, x + w, y, x + w, y + h, x, y + h]
            instances.append(dict(id=len(instances) + 1, image_id=image_id, category_id=category,
                                  bbox=[x, y, w, h], area=w * h, iscrowd=0,
                                  segmentation=[polygon]))
            ids[y:y + h, x:x + w] = segment_id
            segments.append(dict(id=segment_id, category_id=category, iscrowd=0,
                                 bbox=[x, y, w, h], area=w * h))
        segments[0]['area'] = int((ids == 3).sum())
        rgb = np.stack([ids % 256, ids // 256 % 256, ids // 65536], -1).astype(np.uint8)
        mmcv.imwrite(rgb[..., ::-1], f'{root}/annotations/panoptic_train2017/{name}.png')
        panoptic.append(dict(image_id=image_id, file_name=f'{name}.png', segments_info=segments))
    things = [dict(id=1, name='person', supercategory='person', isthing=1),
              dict(id=3, name='car', supercategory='vehicle', isthing=1)]
    stuff = [dict(id=187, name='sky-other-merged', supercategory='sky', isthing=0)]
    for name, content in [('instances_train2017.json',
                           dict(images=images, annotations=instances, categories=things)),
                          ('panoptic_train2017.json',
                           dict(images=images, annotations=panoptic, categories=things + stuff))]:
        with open(f'{root}/annotations/{name}', 'w') as f:
            json.dump(content, f)


def _ade_tree(root):
    import mmcv
    for i in (1, 2):
        name = f'ADE_train_{i:08d}'
        mmcv.imwrite(_image(10 + i), f'{root}/images/training/{name}.jpg')
        labels = np.zeros((96, 128), dtype=np.uint8)
        labels[:, :64], labels[20:70, 70:120] = 3, 13  # wall-ish, person-ish; 0 is ignored
        labels[80:] = 1
        mmcv.imwrite(labels, f'{root}/annotations/training/{name}.png')


@pytest.fixture(scope='module')
def data_roots(tmp_path_factory):
    root = tmp_path_factory.mktemp('recipe_data')
    _coco_tree(f'{root}/coco')
    _ade_tree(f'{root}/ade')
    return dict(mmdet=f'{root}/coco/', mmseg=f'{root}/ade/')


# ----------------------------------------------------------------------------------------------
def quiet_optim_wrapper(model, optim_wrapper_cfg):
    """The config's optimizer for ``model``, without MMEngine's log line per parameter (thousands
    for a detector)."""
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        return build_optim_wrapper(model, optim_wrapper_cfg)
    finally:
        logger.setLevel(level)


def _matches(key, names):
    return [n for n in names if key in n]  # MMEngine's rule: the key is part of the name


def check_paramwise_settings(cfg, family):
    """Swin's per-parameter settings, in our names, on the full-size model (meta device)."""
    from mmengine.registry import MODELS
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.backbone.pop('init_cfg', None)
    with torch.device('meta'):
        model = MODELS.build(model_cfg)
    names = [n for n, _ in model.named_parameters()]
    keys = cfg.optim_wrapper.get('paramwise_cfg', {}).get('custom_keys', {})
    for key in keys:  # a key that matches nothing would silently change the recipe
        matched = _matches(key, names)
        assert matched, f'custom key {key!r} matches no parameter'
        if key not in RECIPE_KEYS:
            assert all(n.startswith('backbone.') for n in matched), (key, matched)
    groups = {id(p): g for g in quiet_optim_wrapper(model, cfg.optim_wrapper).param_groups
              for p in g['params']}
    lr, decay = cfg.optim_wrapper.optimizer.lr, cfg.optim_wrapper.optimizer.weight_decay
    dino = cfg.model.type == 'DINO'  # Swin's DINO config keeps the recipe's uniform decay
    backbone_lr = lr * (0.1 if 'backbone' in keys else 1.)
    exempt = []
    for module in model.backbone.modules():
        norm = isinstance(module, (nn.LayerNorm, nn.GroupNorm, _NormBase))
        for name, param in module.named_parameters(recurse=False):
            group = groups[id(param)]
            no_decay = (norm or name in TABLES) and not dino
            exempt += [name] * no_decay
            assert group['lr'] == pytest.approx(backbone_lr), (name, group['lr'])
            assert group['weight_decay'] == (0. if no_decay else decay), (name, group)
    if not dino:
        assert (FAMILIES[family] in ('TransCNN', 'HATNet')) == (not TABLES & set(exempt)), exempt


SIZE_KEYS = ('scale', 'scales', 'crop_size', 'size', 'max_size')


def _divide(value, factor):
    if isinstance(value, (list, tuple)):
        return type(value)(_divide(v, factor) for v in value)
    return max(1, int(value) // factor)


def shrink(value, factor):
    """A copy of a transform or batch augmentation (nested in lists and dicts) with its sizes
    divided by ``factor``."""
    if isinstance(value, dict):
        return {k: _divide(v, factor) if k in SIZE_KEYS else shrink(v, factor)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(shrink(v, factor) for v in value)
    return value


def dataloader_cfg(cfg, data_root, factor=1):
    loader = copy.deepcopy(cfg.train_dataloader)
    loader.update(batch_size=2, num_workers=0, persistent_workers=False)
    dataset = loader.dataset.get('dataset', loader.dataset)  # the 3x recipe's RepeatDataset
    dataset.data_root = data_root
    if factor > 1:
        dataset.pipeline = [shrink(t, factor) for t in dataset.pipeline]
    return loader


def check_pipeline_reads(cfg, scope, data_root):
    """The config's own train pipeline, at its own sizes, on the tiny tree."""
    from mmengine.registry import DATASETS
    dataset = DATASETS.build(dataloader_cfg(cfg, data_root).dataset)
    sample = dataset[0]
    height, width = sample['inputs'].shape[-2:]
    if scope == 'mmseg':  # ADE20K: shortest edge 256-1024, then a 512 crop
        assert max(height, width) <= 512 and sample['data_samples'].gt_sem_seg.data.shape[
            -2:] == (height, width)
        return
    if 'panoptic' in cfg.filename:  # the PNG's segment ids decoded into classes, not all ignored
        sem_seg = sample['data_samples'].gt_sem_seg.sem_seg
        assert sem_seg.shape[-2:] == (height, width) and (sem_seg != 255).any()
    assert len(sample['data_samples'].gt_instances) > 0 or cfg.model.type == 'Mask2Former'
    if cfg.model.type == 'Mask2Former':  # large-scale jitter: a crop of at most 1024 x 1024
        assert max(height, width) <= 1024
    else:  # DETR's multi-scale crops: shortest edge 480-800, longest at most 1333
        assert 480 <= min(height, width) <= 800 and max(height, width) <= 1333


def tiny_model_cfg(cfg, family, scope):
    """The config's model with the family's tiny arch and the channels it gives."""
    from mmengine.registry import MODELS
    model_cfg = copy.deepcopy(cfg.model)
    backbone = model_cfg.backbone
    backbone.pop('init_cfg', None)
    backbone.update(TINY_ARCHS[FAMILIES[family]])
    probe = revert_sync_batchnorm(MODELS.build(backbone)).eval()
    with torch.no_grad():
        channels = [f.shape[1] for f in probe(torch.zeros(1, 3, 64, 64))]
    head = ('neck' if 'neck' in model_cfg else
            'panoptic_head' if scope == 'mmdet' else 'decode_head')
    model_cfg[head].in_channels = channels
    if scope == 'mmseg':
        model_cfg.data_preprocessor.size = _divide(model_cfg.data_preprocessor.size, SHRINK)
    else:
        model_cfg.data_preprocessor = shrink(model_cfg.data_preprocessor, SHRINK)
    if model_cfg.type == 'DINO':  # its top-k proposals need as many tokens: 900 > an 80 px image's
        model_cfg.num_queries = 100
    if 'roi_head' in model_cfg:  # mmcv's CPU RoIAlign and 512 RoIs x 3 stages dominate the step
        model_cfg.roi_head.bbox_roi_extractor.roi_layer.sampling_ratio = 2
        model_cfg.roi_head.mask_roi_extractor.roi_layer.sampling_ratio = 2
        model_cfg.train_cfg.rpn_proposal.update(nms_pre=1000, max_per_img=200)
        for stage in model_cfg.train_cfg.rcnn:
            stage.sampler.num = 32
    return model_cfg


def load(config):
    cfg = Config.fromfile(osp.join(REPO, 'configs', config))
    import mmhvit  # noqa: F401  (what custom_imports does)
    init_default_scope(cfg.default_scope)
    return cfg, family_of(config), cfg.default_scope


@pytest.mark.parametrize('config', CONFIGS)
def test_recipe_config_builds_with_swins_paramwise_settings(config):
    cfg, family, _ = load(config)
    # what the user's config holds: custom_imports, no import of ours in the config file
    assert cfg.custom_imports == dict(imports=['mmhvit'], allow_failed_imports=False)
    assert cfg.model.backbone.type == f'mmhvit.{FAMILIES[family]}'
    assert cfg.model.backbone.drop_path_rate == (0.2 if 'mask2former' not in config else 0.3)
    check_paramwise_settings(cfg, family)


@pytest.mark.parametrize('config', CONFIGS)
def test_recipe_config_reads_its_data_and_steps(config, data_roots):
    cfg, family, scope = load(config)
    check_pipeline_reads(cfg, scope, data_roots[scope])

    from mmengine.registry import MODELS
    set_random_seed(0)  # the same crops and draws on every run
    model = revert_sync_batchnorm(MODELS.build(tiny_model_cfg(cfg, family, scope)))
    model.init_weights()
    model.train()
    loader = Runner.build_dataloader(dataloader_cfg(cfg, data_roots[scope], SHRINK), seed=0)
    batch = next(iter(loader))
    optim_wrapper = quiet_optim_wrapper(model, cfg.optim_wrapper)
    before = {n: p.detach().clone() for n, p in model.backbone.named_parameters()}
    log_vars = model.train_step(batch, optim_wrapper)
    assert torch.isfinite(log_vars['loss'])
    moved = [n for n, p in model.backbone.named_parameters() if not torch.equal(p, before[n])]
    assert moved, 'the step left every backbone parameter as it was'
    if scope == 'mmseg':  # get_flops.py's tensor forward reaches MMSeg's Mask2Former head
        from mmhvit.utils.export import TensorForward, synthetic_data_samples
        with torch.no_grad():
            classes, masks = TensorForward(model.eval(), synthetic_data_samples('mmseg', 64, 64))(
                torch.zeros(1, 3, 64, 64))
        assert classes[-1].shape[-1] == cfg.model.decode_head.num_classes + 1
        assert masks[-1].shape[-2:] == (16, 16)  # the stride-4 mask features


def test_readme_swap_in_a_swin_config_builds(tmp_path):
    """The README's three-line swap, on mmdet's Swin config, gives a model whose neck takes our
    backbone's maps."""
    from mmdet.registry import MODELS
    readme = open(osp.join(REPO, 'README.md')).read()
    section = readme[readme.index('In any Swin config the swap'):]
    start = section.index('```python\n') + len('```python\n')
    block = section[start:section.index('\n```', start)]
    assert block.startswith("_base_ = 'mmdet::swin/") and len(block.splitlines()) == 4
    (tmp_path / 'swap.py').write_text(block)
    cfg = Config.fromfile(str(tmp_path / 'swap.py'))
    assert cfg.custom_imports == dict(imports=['mmhvit'], allow_failed_imports=False)
    import mmhvit  # noqa: F401
    init_default_scope('mmdet')
    cfg.model.backbone.pop('init_cfg', None)
    model = MODELS.build(cfg.model).eval()
    with torch.no_grad():
        maps = model.backbone(torch.zeros(1, 3, 64, 64))
    assert [m.shape[1] for m in maps] == cfg.model.neck.in_channels
    assert 'window_size' not in cfg.model.backbone  # _delete_ dropped Swin's arguments


def test_quickstart_results_compare_the_mask2former_pair_without_an_absolute_bar():
    from mmhvit.analysis import quickstart as tool
    rows = [dict(config=f'mask2former_{b}_12e_shapes.py', algo='mask2former', task='m2f',
                 backbone=b, metrics={'segm mAP': m, 'segm AP50': m, 'bbox mAP': m},
                 untrained={'segm mAP': 0., 'segm AP50': 0., 'bbox mAP': 0.})
            for b, m in [('transcnn-q', 0.5), ('r18', 0.4)]]
    lines = tool.targets(rows)
    assert lines == [
        '- mask2former_transcnn-q_12e_shapes.py: segm mAP 0.500 = 50.0x untrained (0.000, '
        'counted as 0.01): met (>= 3x)',
        "- mask2former_transcnn-q_12e_shapes.py: 1.25x ResNet-18's segm mAP: met (>= 1.0x)",
        '- mask2former: best of ours (transcnn-q, segm mAP 0.500) vs ResNet-18 (0.400): met']
    assert '| m2f: mask2former (segm mAP) | 0.500 | — | — | — | — | 0.400 |' in tool.summary_table(
        rows)
