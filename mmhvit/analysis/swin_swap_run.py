"""One Swin model with one of our backbones, as a user swaps it: the packaged config, its backbone
dict replaced (``_delete_=True``, ``type='mmhvit.<Family>'``, the levels Swin gave the model) and
the input widths of what reads the maps set to our ``out_channels``; then the model is built,
trains one step on a small synthetic batch with the config's optimiser (gradients finite and
reaching the backbone's stem) and predicts.

Only the inputs are made small: the data preprocessor's fixed pad size (MMSeg's crop, MMDet's
batch padding) follows the test images; the model's structure is the config's.
"""
import contextlib
import copy
import importlib
import inspect
import logging
import math
from typing import Dict, List, Optional, Tuple

import torch
from mmengine.config import Config

from ..testing import FAMILIES, TINY_ARCHS
from .swin_swap import SwinModel, heads_of, necks_of, short_type, swin_levels, swin_widths

# mmpretrain's layer-decay constructor asks the backbone for get_layer_depth (Swin's, ViT's); ours
# is LayerDecayOptimWrapperConstructor, which takes the same layer_decay_rate.
CONSTRUCTORS = {'LearningRateDecayOptimWrapperConstructor': 'LayerDecayOptimWrapperConstructor'}
# The suite's runs lower counts that only cost time on a CPU and leave the structure: V3Det's
# 13,204 classes (an untrained model's class-wise NMS takes minutes), the DETRs' 900 queries (a
# two-stage DETR needs as many encoder tokens, hence larger images), the RoIs sampled for
# training (``num``) and the proposals kept for prediction (``nms_pre``, ``max_per_img``).
SUITE_CAPS = dict(num_classes=1000, num_queries=100, num=64, nms_pre=100, max_per_img=100)


def tiny_widths(family: str, multiple: int = 1) -> dict:
    """The tiny arch of ``family`` (:data:`TINY_ARCHS`) with its widths multiplied by the least
    factor that makes each a multiple of ``multiple`` (a neck's GroupNorm(32) over our maps)."""
    arch = dict(TINY_ARCHS[family]['arch'])
    dims = arch['embed_dims']
    widths = dims if isinstance(dims, list) else [dims]
    factor = next(k for k in range(1, multiple + 1) if all(w * k % multiple == 0 for w in widths))
    arch['embed_dims'] = [w * factor for w in dims] if isinstance(dims, list) else dims * factor
    return dict(TINY_ARCHS[family], arch=arch)


def our_backbone(family: str, levels, in_channels: int = 3, multiple: int = 1) -> dict:
    """The backbone dict a user writes over Swin's, with a tiny arch (:func:`tiny_widths`)."""
    if family not in FAMILIES:
        raise ValueError(f'unknown family {family!r}; choose from {sorted(FAMILIES)}')
    kwargs = tiny_widths(family, multiple)
    return dict(_delete_=True, type=f'mmhvit.{family}', out_indices=tuple(levels),
                in_channels=in_channels, **kwargs)


def _takes_in_channels(package: str, cfg: dict) -> bool:
    registry = importlib.import_module(f'{package}.registry').MODELS
    return 'in_channels' in inspect.signature(registry.get(cfg['type'])).parameters


def readers(package: str, model: dict) -> List[Tuple[str, dict]]:
    """(dotted key, dict) of the modules that take the backbone's maps and need their widths: the
    first neck that has an ``in_channels`` argument (a pooling neck passes the maps on), else
    every head."""
    necks = necks_of(model)
    for index, neck in enumerate(necks):
        if _takes_in_channels(package, neck):
            listed = isinstance(model.neck, (list, tuple))
            return [(f'model.neck.{index}' if listed else 'model.neck', neck)]
    found = []
    for key, values in heads_of(model).items():
        if isinstance(model[key], (list, tuple)):
            found += [(f'model.{key}.{i}', head) for i, head in enumerate(values)]
        else:
            found.append((f'model.{key}', values[0]))
    return found


def _width_changes(prefix: str, cfg: dict, swin: List[int], ours: List[int], top: bool) -> dict:
    """{dotted key: our widths} for the ``in_channels`` under ``cfg`` that are Swin's: a list
    equal to Swin's widths (any depth), or, at the top, one int equal to the width of the level
    its ``in_index`` takes (the last one without)."""
    changes = {}
    for key, value in cfg.items():
        path = f'{prefix}.{key}'
        if key == 'in_channels' and isinstance(value, (list, tuple)) and list(value) == swin:
            changes[path] = list(ours)
        elif key == 'in_channels' and top and isinstance(value, int):
            index = cfg.get('in_index', -1)
            if isinstance(index, int) and value == swin[index]:
                changes[path] = ours[index]
        elif isinstance(value, dict):
            changes.update(_width_changes(path, value, swin, ours, False))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    changes.update(_width_changes(f'{path}.{i}', item, swin, ours, False))
    return changes


def _group_norm_multiple(readers_: List[Tuple[str, dict]]) -> int:
    """What our widths must be multiples of for the readers' GroupNorm: twice the largest group
    count (a CSP block normalises half its input's channels); 1 without GroupNorm."""
    norms = [cfg.get('norm_cfg') or {} for _, cfg in readers_]
    return max([2 * n.get('num_groups', 1) for n in norms if short_type(n) == 'GN'] + [1])


def swap_backbone(cfg: Config, package: str, family: str) -> Dict[str, object]:
    """Replace Swin in ``cfg`` by ``family`` as a user does (``merge_from_dict``); returns the
    keys set besides the backbone ({'model.neck.in_channels': [16, 32, 64], ...}): the widths of
    what reads the maps, no Swin checkpoint (``model.pretrained``), our layer-decay constructor
    (:data:`CONSTRUCTORS`). Raises our backbone's error when it cannot give the levels the model
    reads (a fifth, stride-64 level)."""
    swin = cfg.model.backbone
    levels = swin_levels(package, swin)
    ours = our_backbone(family, levels, swin.get('in_channels', 3),
                        _group_norm_multiple(readers(package, cfg.model)))
    built = FAMILIES[family](**{k: v for k, v in ours.items() if k not in ('_delete_', 'type')})
    widths = swin_widths(package, swin)
    swin_out = [widths[level] for level in levels]
    changes = {}
    for prefix, reader in readers(package, cfg.model):
        changes.update(_width_changes(prefix, reader, swin_out, list(built.out_channels), True))
    if not changes:
        raise ValueError(f'no in_channels equal to Swin\'s widths {swin_out} in what reads the '
                         f'maps ({[p for p, _ in readers(package, cfg.model)]})')
    if cfg.model.get('pretrained'):  # Swin's weights (MMSeg's EncoderDecoder passes them on)
        changes['model.pretrained'] = None
    constructor = cfg.get('optim_wrapper', {}).get('constructor')
    if constructor in CONSTRUCTORS:
        changes['optim_wrapper.constructor'] = CONSTRUCTORS[constructor]
    cfg.merge_from_dict({'model.backbone': ours, **changes}, allow_list_keys=True)
    cfg.custom_imports = dict(imports=['mmhvit'], allow_failed_imports=False)
    return changes


def small_inputs(cfg: Config, size: int) -> None:
    """The data preprocessor's fixed pad size (MMSeg's ``size``, MMDet's batch padding) follows
    ``size`` x ``size`` test images instead of the recipe's crop."""
    if 'data_preprocessor' in cfg:  # as the Runner does
        cfg.model.setdefault('data_preprocessor', cfg.data_preprocessor)
    preprocessor = cfg.model.get('data_preprocessor', {})
    if preprocessor.get('size'):
        preprocessor.size = (size, size)
    for augment in preprocessor.get('batch_augments') or []:
        if 'size' in augment:
            augment.size = (size, size)


def _detection_sample(size: int, with_mask: bool):
    """An MMDet sample with two boxes (and their masks), scaled to the image."""
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    meta = dict(img_shape=(size, size), ori_shape=(size, size), scale_factor=(1., 1.),
                pad_shape=(size, size))
    sample = DetDataSample(metainfo=meta)
    boxes = torch.tensor([[0.1, 0.15, 0.55, 0.6], [0.4, 0.3, 0.9, 0.85]]) * size
    masks = torch.zeros(2, size, size, dtype=torch.uint8)
    for mask, (x0, y0, x1, y1) in zip(masks, boxes.int().tolist()):
        mask[y0:y1, x0:x1] = 1
    sample.gt_instances = InstanceData(bboxes=boxes, labels=torch.tensor([0, 1]))
    if with_mask:
        sample.gt_instances.masks = BitmapMasks(masks.numpy(), size, size)
    return sample


def _segmentation_sample(size: int, num_classes: int):
    """An MMSeg sample: class 1 in one box, class 2 (or 1) in another, 0 elsewhere (a few
    segments, as in a real image; a random label map would give a mask head every class to
    match)."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    sample = SegDataSample(metainfo=dict(img_shape=(size, size), ori_shape=(size, size),
                                         pad_shape=(size, size)))
    labels = torch.zeros(1, size, size, dtype=torch.long)
    labels[:, size // 8:size // 2, size // 8:size // 2] = 1
    labels[:, size // 2:, size // 3:] = min(2, num_classes - 1)
    sample.gt_sem_seg = PixelData(data=labels)
    return sample


def swap_batch(package: str, model, cfg: dict, size: int) -> dict:
    """Two random ``size`` x ``size`` images for ``model`` (built from the model dict ``cfg``)
    with the backbone's input channels, and their samples (instance masks where a head
    segments)."""
    from ..testing.batches import classification_sample
    if package == 'mmdet':
        masks = 'mask_head' in cfg.get('roi_head', {}) or 'panoptic_head' in cfg
        sample = _detection_sample(size, masks)
    elif package == 'mmseg':
        sample = _segmentation_sample(size, model.decode_head.num_classes)
    else:
        sample = classification_sample()
    channels = cfg.backbone.get('in_channels', 3)
    images = [torch.randint(0, 256, (channels, size, size), dtype=torch.uint8) for _ in range(2)]
    return dict(inputs=images, data_samples=[sample, copy.deepcopy(sample)])


def cpu_optim_wrapper(optim_wrapper: dict) -> dict:
    """The config's optimiser wrapper; mixed precision (a GPU setting) becomes full precision."""
    optim_wrapper = copy.deepcopy(optim_wrapper)
    if optim_wrapper.get('type') == 'AmpOptimWrapper':
        optim_wrapper.type = 'OptimWrapper'
        for key in ('loss_scale', 'dtype', 'use_fsdp'):
            optim_wrapper.pop(key, None)
    return optim_wrapper


def check_gradients(backbone: torch.nn.Module) -> None:
    """Every trainable parameter of the backbone has a finite gradient, and the stem's (the first
    parameter) is not zero: the loss reaches the backbone's input end."""
    params = [(n, p) for n, p in backbone.named_parameters() if p.requires_grad]
    missing = [n for n, p in params if p.grad is None]
    if missing:
        raise AssertionError(f'no gradient for {len(missing)} backbone parameters: {missing[:3]}')
    bad = [n for n, p in params if not torch.isfinite(p.grad).all()]
    if bad:
        raise AssertionError(f'non-finite gradients in the backbone: {bad[:3]}')
    name, stem = params[0]
    if not stem.grad.any():
        raise AssertionError(f'zero gradient at the backbone\'s stem ({name})')


def check_predictions(outputs, count: int) -> List[str]:
    """``count`` samples, each with a prediction field (``pred_*``) whose float values are finite;
    returns the fields' names."""
    if len(outputs) != count:
        raise AssertionError(f'{len(outputs)} predictions for {count} images')
    fields = sorted(k for k in outputs[0].keys() if k.startswith('pred_'))
    if not fields:
        raise AssertionError(f'no prediction field in {sorted(outputs[0].keys())}')
    for output in outputs:
        for name in fields:
            value = output.get(name)
            tensors = [value] if torch.is_tensor(value) else list(value.values())
            for tensor in tensors:
                if torch.is_tensor(tensor) and tensor.is_floating_point() \
                        and not torch.isfinite(tensor).all():
                    raise AssertionError(f'non-finite values in {name}')
    return fields


def input_size(model: dict, smallest: int = 64) -> int:
    """The side of the square test images: ``smallest``, or for a two-stage DETR (its decoder's
    queries are the top-scoring encoder tokens) the smallest multiple of 32 whose tokens over the
    neck's levels are at least ``num_queries``."""
    queries = model.get('num_queries')
    if not queries or not (model.get('as_two_stage') or model.type == 'DINO'):
        return smallest
    levels = [level for level in range(8) if level in model.backbone.out_indices]
    strides = [4 * 2**level for level in levels]
    necks = necks_of(model)
    extra = necks[0].get('num_outs', len(strides)) - len(strides) if necks else 0
    strides += [strides[-1] * 2**(i + 1) for i in range(extra)]
    size = smallest
    while sum(math.ceil(size / s)**2 for s in strides) < queries:
        size += 32
    return size


def cap_counts(cfg: dict, caps: Dict[str, int]) -> None:
    """Every ``key: int`` under ``cfg`` with ``key`` in ``caps`` and a value above ``caps[key]``
    becomes ``caps[key]`` (:data:`SUITE_CAPS`)."""
    for key, value in cfg.items():
        if key in caps and isinstance(value, int) and value > caps[key]:
            cfg[key] = caps[key]
        elif isinstance(value, dict):
            cap_counts(value, caps)
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, dict):
                    cap_counts(item, caps)


@contextlib.contextmanager
def quiet_logs():
    """MMEngine's per-parameter INFO lines (optimiser options, weight init) are not shown."""
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def build_swapped(model: SwinModel, family: str, size: Optional[int] = None,
                  caps: Optional[Dict[str, int]] = None):
    """(the config with ``family`` in Swin's place and inputs of side ``size`` (default
    :func:`input_size`), the built model (SyncBN as BN: one CPU process; weights initialised as
    training starts), the keys :func:`swap_backbone` set)."""
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import init_default_scope
    from mmengine.utils import import_modules_from_strings
    cfg = Config.fromfile(model.file)
    changes = swap_backbone(cfg, model.package, family)
    if caps:
        cap_counts(cfg.model, caps)
    small_inputs(cfg, size or input_size(cfg.model))
    import_modules_from_strings(**cfg.custom_imports)
    init_default_scope(model.package)
    registry = importlib.import_module(f'{model.package}.registry').MODELS
    net = revert_sync_batchnorm(registry.build(cfg.model))
    net.init_weights()
    return cfg, net, changes


def run_swap(model: SwinModel, family: str, size: Optional[int] = None, seed: int = 0,
             caps: Optional[Dict[str, int]] = None) -> dict:
    """Swap ``model``'s Swin for a tiny ``family`` backbone, build it, train one step on two
    square images (side ``size``, default :func:`input_size`) and predict them. Returns the
    loss, the width keys set, the image size and the prediction fields; raises where a step
    fails. ``caps`` lowers counts of the model (:func:`cap_counts`); None runs it as shipped."""
    from mmengine.optim import build_optim_wrapper
    torch.manual_seed(seed)
    with quiet_logs():
        cfg, net, changes = build_swapped(model, family, size, caps)
        size = size or input_size(cfg.model)
        optim_wrapper = build_optim_wrapper(net, cpu_optim_wrapper(cfg.optim_wrapper))
    batch = swap_batch(model.package, net, cfg.model, size)
    net.train()
    loss, _ = net.parse_losses(net(**net.data_preprocessor(batch, True), mode='loss'))
    if not torch.isfinite(loss):
        raise AssertionError(f'non-finite training loss {loss.item()}')
    optim_wrapper.backward(loss)
    check_gradients(net.backbone)
    optim_wrapper.step()
    optim_wrapper.zero_grad()
    net.eval()
    with torch.no_grad():
        fields = check_predictions(net.test_step(batch), len(batch['inputs']))
    return dict(loss=loss.item(), size=size, predictions=fields, changes=changes)


def one_line(error: BaseException, limit: Optional[int] = 160) -> str:
    """``Type: first line of the message`` (cut at ``limit`` characters)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    line = f'{type(error).__name__}: {lines[0] if lines else ""}'.rstrip(': ')
    return line if limit is None or len(line) <= limit else line[:limit - 3] + '...'
