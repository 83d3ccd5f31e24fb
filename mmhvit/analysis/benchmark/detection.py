"""Our backbones in RetinaNet and Mask R-CNN against MMDetection's own Swin-T, PVTv2-b2 and
ResNet-50 configs (``--sections detection``): training-step and inference time, peak memory,
params and backbone FLOPs, CPU, fp32, random weights."""
import contextlib
import os.path as osp
import statistics
from typing import Dict, Iterator, List, Optional

import numpy as np
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope

from mmhvit.utils.flops import count_flops, count_params
from mmhvit.utils.measure import (
    FreshProcessDied,
    PeakMemory,
    SavedForBackward,
    alternating_samples,
    in_fresh_process,
    release_freed_memory_at_once,
    spread,
)

from .models import REPO, log

DET_ALGOS = {'retinanet': 'RetinaNet', 'mask-rcnn': 'Mask R-CNN'}
OURS = {'TransCNN-B': 'transcnn_b', 'HAT-Net-S': 'hatnet_s', 'NesT-T': 'nest_t', 'TNT-S': 'tnt_s',
        'PyramidTNT-S': 'ptnt_s'}
# MMDetection's configs (under mmdet/.mim/configs); None: MMDet ships none, see detector_config.
REFERENCES = {
    'Swin-T': {'retinanet': 'swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py',
               'mask-rcnn': 'swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'},
    'PVTv2-b2': {'retinanet': 'pvt/retinanet_pvtv2-b2_fpn_1x_coco.py', 'mask-rcnn': None},
    'ResNet-50': {'retinanet': 'retinanet/retinanet_r50_fpn_1x_coco.py',
                  'mask-rcnn': 'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'},
}
DET_BACKBONES = (*OURS, *REFERENCES)
BASELINE = 'Swin-T'
# The ratio columns, in this order.
RATIO_KEYS = ('train', 'train_peak', 'infer', 'infer_peak')
MET = {True: 'met', False: 'missed'}


def selected_backbones(args) -> List[str]:
    """``--det-backbones`` in the tables' order (ours, then the references)."""
    return [name for name in DET_BACKBONES if name in args.det_backbones]


def mmdet_config(path: str) -> Config:
    import mmdet
    return Config.fromfile(osp.join(osp.dirname(mmdet.__file__), '.mim', 'configs', path))


def detector_config(algo: str, name: str) -> Config:
    """The COCO config of ``algo`` with backbone ``name``, its backbone randomly initialised."""
    if name in OURS:
        cfg = Config.fromfile(
            osp.join(REPO, 'configs', f'{algo.replace("-", "_")}_{OURS[name]}_coco.py'))
    elif REFERENCES[name][algo]:
        cfg = mmdet_config(REFERENCES[name][algo])
    else:  # PVTv2-b2 Mask R-CNN: the R-50 one with the backbone of MMDet's PVTv2-b2 RetinaNet
        cfg = mmdet_config(REFERENCES['ResNet-50'][algo])
        pvt = mmdet_config(REFERENCES[name]['retinanet']).model
        cfg.model.backbone = pvt.backbone
        cfg.model.neck.in_channels = pvt.neck.in_channels  # Mask R-CNN's FPN levels, PVT widths
    cfg.model.backbone.init_cfg = None  # no checkpoint: nothing to download
    return cfg


def build_detector(algo: str, name: str, backbone_overrides: Optional[dict] = None) -> nn.Module:
    """The detector, each part with its own random init (e.g. RetinaNet's classifier prior);
    ``backbone_overrides`` update its backbone config (``dict(with_cp=True)``)."""
    from mmdet.registry import MODELS
    from mmengine.model import revert_sync_batchnorm

    import mmhvit  # noqa: F401  (registers our backbones)
    init_default_scope('mmdet')
    # One process: SyncBN (PyramidTNT's configs) as BN, as MMEngine's Runner does.
    cfg = detector_config(algo, name)
    cfg.model.backbone.update(backbone_overrides or {})
    model = revert_sync_batchnorm(MODELS.build(cfg.model))
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel('WARNING')  # init_weights logs a line per parameter
    model.init_weights()
    logger.setLevel(level)
    return model


def synthetic_batch(batch: int, height: int, width: int, with_mask: bool) -> dict:
    """``batch`` random images with the same two ground-truth boxes each (and their masks), as a
    data loader hands them to the model's data_preprocessor."""
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    gen = torch.Generator().manual_seed(0)
    # x1, y1, x2, y2 as fractions of the image: a large box and a small one
    boxes = torch.tensor([[.1, .2, .6, .9], [.55, .1, .8, .35]]) * torch.tensor([width, height] * 2)
    masks = np.zeros((2, height, width), np.uint8)
    for mask, (x1, y1, x2, y2) in zip(masks, boxes.round().int().tolist()):
        mask[y1:y2, x1:x2] = 1
    inputs, samples = [], []
    for _ in range(batch):
        inputs.append(torch.randint(0, 256, (3, height, width), generator=gen, dtype=torch.uint8))
        sample = DetDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width),
                                             scale_factor=(1., 1.)))
        sample.gt_instances = InstanceData(bboxes=boxes.clone(), labels=torch.tensor([0, 1]))
        if with_mask:
            sample.gt_instances.masks = BitmapMasks(masks.copy(), height, width)
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


def detector_steps(model: nn.Module, data: dict):
    """(training step, inference) of ``model`` on ``data``. The training step is MMEngine's
    ``train_step`` unwrapped: forward, loss, backward, ``torch.optim.AdamW`` step; inference is
    ``mode='predict'`` in eval mode without grad. Each sets the model's mode: they alternate."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
    train_data = model.data_preprocessor(data, True)
    test_data = model.data_preprocessor(data, False)

    def train_step():
        model.train()
        loss, _ = model.parse_losses(model(**train_data, mode='loss'))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # no gradients held while the other models run

    def predict():
        model.eval()
        with torch.no_grad():
            model(**test_data, mode='predict')

    return train_step, predict


def peak_probe(algo: str, name: str, batch: int, size: str, training: bool) -> int:
    """Resident-set peak (bytes) of two training steps or two inferences above the level with
    the model built; run it through :func:`mmhvit.utils.in_fresh_process`."""
    release_freed_memory_at_once()
    torch.manual_seed(0)
    height, width = (int(v) for v in size.split('x'))
    model = build_detector(algo, name)
    steps = detector_steps(model, synthetic_batch(batch, height, width, algo == 'mask-rcnn'))
    step = steps[0] if training else steps[1]
    with PeakMemory('cpu') as mem:
        step()
        step()  # the second with AdamW's state in place, as every later training step
    return mem.peak


def peaks(algo: str, name: str, batch: int, args) -> Dict[str, Optional[int]]:
    """Training and inference peaks of one detector, each from a fresh process; None where that
    process died (its log line says how: the out-of-memory killer, usually)."""
    log(f'detection: {algo} {name}, batch {batch}, peak memory (fresh processes)')
    result = {}
    for key, training in (('train_peak', True), ('infer_peak', False)):
        try:
            result[key] = in_fresh_process(peak_probe, algo, name, batch, args.det_size, training,
                                           threads=args.threads)
        except FreshProcessDied as error:
            log(f'detection: {algo} {name}, batch {batch}: {error}')
            result[key] = None
    return result


def model_figures(model: nn.Module, height: int, width: int) -> Dict[str, float]:
    """Params (M) of the backbone and the detector, backbone GFLOPs of one image."""
    x = model.data_preprocessor(synthetic_batch(1, height, width, False), False)['inputs']
    model.eval()
    with torch.no_grad():
        flops = count_flops(model.backbone, (x, ), with_attention=True)
    return dict(backbone_params=count_params(model.backbone) / 1e6,
                params=count_params(model) / 1e6, gflops=flops / 1e9)


def time_detectors(models: Dict[str, nn.Module], algo: str, batch: int, height: int, width: int,
                   args) -> Dict[str, Dict[str, List[float]]]:
    """Seconds of each repeat of every model's training step and inference, all of them
    round-robin (:func:`mmhvit.utils.alternating_samples`) so that drift hits all alike."""
    steps = {name: detector_steps(model, synthetic_batch(batch, height, width, algo == 'mask-rcnn'))
             for name, model in models.items()}
    samples = alternating_samples([fn for pair in steps.values() for fn in pair], args.repeats,
                                  args.warmup)
    return {name: dict(train=samples[2 * i], infer=samples[2 * i + 1])
            for i, name in enumerate(steps)}


def value(result: dict, key: str) -> Optional[float]:
    """A row's figure: the median seconds of a timing, or the peak bytes (None: not measured)."""
    return statistics.median(result[key]) if 'peak' not in key else result[key]


def ratios(result: dict, base) -> Dict[str, Optional[float]]:
    if not base:
        return {}
    pairs = {key: (value(result, key), value(base, key)) for key in RATIO_KEYS}
    return {key: None if a is None or b is None else a / b for key, (a, b) in pairs.items()}


def mib(peak: Optional[int]) -> str:
    return 'died' if peak is None else f'{peak / 2**20:.0f}'


def table_row(name: str, batch: int, result: dict, base) -> str:
    r = ratios(result, base)
    cells = ['—' if not r or r[key] is None else f'{r[key]:.2f}' for key in RATIO_KEYS]
    target = '—'
    if r and name in OURS:
        checked = (r['train'], r['train_peak'])
        target = 'unknown' if None in checked else MET[max(checked) <= 1.]
    return (f'| {name} | {batch} | {result["backbone_params"]:.1f} | {result["params"]:.1f} | '
            f'{result["gflops"]:.1f} | {spread(result["train"], 3)} | '
            f'{spread(result["infer"], 3)} | {mib(result["train_peak"])} | '
            f'{mib(result["infer_peak"])} | {" | ".join(cells)} | {target} |')


def summary_line(title: str, batch: int, results: Dict[str, dict]) -> str:
    """Fastest and lightest of our families, and the targets against the baseline."""
    ours = {name: r for name, r in results.items() if name in OURS}
    if not ours:
        return ''
    fastest = min(ours, key=lambda n: value(ours[n], 'train'))
    line = (f'- {title}, batch {batch}: fastest training step of ours {fastest} '
            f'({value(ours[fastest], "train"):.3f} s)')
    measured = {name: r for name, r in ours.items() if r['train_peak'] is not None}
    died = [name for name in ours if name not in measured]
    lightest = min(measured, key=lambda n: measured[n]['train_peak']) if measured else None
    if lightest:
        line += f', lightest {lightest} ({mib(measured[lightest]["train_peak"])} MiB)'
    if died:
        line += f' (training peak not measured, its process died: {", ".join(died)})'
    base = results.get(BASELINE)
    if base is None or base['train_peak'] is None:
        return line + f'; no {BASELINE} row: targets not checked.'
    r = {name: ratios(result, base) for name, result in ours.items()}
    listed = ', '.join(
        f'{n} {x["train"]:.2f}x / ' + ('?' if x['train_peak'] is None else
                                       f'{x["train_peak"]:.2f}x') for n, x in r.items())
    every = all(x['train'] <= 1. and (x['train_peak'] or 0.) <= 1. for x in r.values())
    every = 'unknown' if every and died else MET[every]
    best_time = r[fastest]['train']
    memory = (f'memory {MET[r[lightest]["train_peak"] <= .8]} ({r[lightest]["train_peak"]:.2f}x)'
              if lightest else 'memory unknown')
    return (line + f'. Against {BASELINE} (time / memory): {listed}. Every family ≤ 1.0x: '
            f'{every}; the best ≤ 0.8x: time {MET[best_time <= .8]} ({best_time:.2f}x), '
            f'{memory}.')


def detector_lines(args, algo: str, height: int, width: int,
                   peak: Dict[tuple, Dict[str, Optional[int]]]) -> List[str]:
    """The table of one detector, all backbones and batches, and its summary lines; ``peak``
    holds the fresh processes' figures by (algo, name, batch)."""
    names = selected_backbones(args)
    title = DET_ALGOS[algo]
    models = {name: build_detector(algo, name) for name in names}
    figures = {name: model_figures(model, height, width) for name, model in models.items()}
    rows, summary = [], []
    for batch in args.det_batches:
        log(f'detection: {title}, batch {batch}, {len(names)} models alternating')
        times = time_detectors(models, algo, batch, height, width, args)
        results = {name: {**figures[name], **peak[algo, name, batch], **times[name]}
                   for name in names}
        rows += [table_row(name, batch, r, results.get(BASELINE)) for name, r in results.items()]
        summary.append(summary_line(title, batch, results))
    return [f'### {title}', '',
            '| backbone | batch | backbone params (M) | params (M) | backbone GFLOPs | '
            'training step (s) min / median / max | inference (s) min / median / max | '
            'peak memory training (MiB) | peak memory inference (MiB) | training time / '
            f'{BASELINE} | training memory / {BASELINE} | inference time / {BASELINE} | '
            f'inference memory / {BASELINE} | target |', '|---' * 14 + '|', *rows, '',
            *[line for line in summary if line], '']


def section_detection(args) -> Iterator[List[str]]:
    """The section's text, one detector's table at a time (the page is written as each comes)."""
    height, width = (int(v) for v in args.det_size.split('x'))
    yield [
        f'## Detectors (CPU, fp32, {height}x{width})', '',
        'Our COCO configs against MMDetection\'s Swin-T, PVTv2-b2 and ResNet-50 ones, random '
        'weights (MMDetection has no PVTv2 Mask R-CNN: its row is `mask-rcnn_r50_fpn_1x_coco.py` '
        'with the backbone and FPN widths of `retinanet_pvtv2-b2_fpn_1x_coco.py`). Input: random '
        'images, two ground-truth boxes (and masks) each. Training step: forward, loss, backward, '
        '`torch.optim.AdamW` step; inference: `mode=\'predict\'`, eval, no grad (random weights '
        'pass few boxes through the score thresholds: the mask head does little). Times: '
        f'{args.repeats} repeats after {args.warmup} warm-up, every model\'s step taken in turn '
        'within each repeat. Peak memory: the resident-set peak (VmHWM) of two steps in a fresh '
        'process above its level with the model built (freed blocks of 64 KiB or more unmapped '
        'at once: `release_freed_memory_at_once`), every one measured before this process '
        'builds any detector (so that a child never shares the machine with the timed models; '
        '"died": the child was killed, by the out-of-memory killer as a rule). Backbone GFLOPs: '
        'multiply-adds of one image, attention products included. Ratios: medians or peaks over '
        f'the {BASELINE} row\'s, same detector and batch. Targets: every family ≤ 1.0x '
        f'{BASELINE} training-step time and peak memory ("target"); the best ≤ 0.8x.', ''
    ]
    names = selected_backbones(args)
    peak = {(algo, name, batch): peaks(algo, name, batch, args)
            for algo in args.det_algos for batch in args.det_batches for name in names}
    for algo in args.det_algos:
        yield detector_lines(args, algo, height, width, peak)


# Self CPU time of the aten ops, grouped; the first group whose words an op name holds wins.
OP_GROUPS = (
    ('attention', ('scaled_dot_product', 'flash_attention', 'efficient_attention', 'softmax')),
    ('optimizer', ('_foreach', 'adam')),
    ('matmul', ('addmm', 'aten::mm', 'bmm', 'matmul', 'linear')),
    ('conv', ('conv', )),
    ('norm', ('norm', )),
    ('copies', ('copy', 'clone', 'contiguous', 'aten::cat', 'stack', 'pad', 'index', 'slice',
                'select', 'unfold', 'im2col', 'col2im', 'roll')),
    ('element-wise, pooling', ('add', 'mul', 'gelu', 'silu', 'relu', 'sub', 'div', 'sigmoid',
                               'where', 'fill', 'zero', 'pool', 'exp', 'sum', 'mean', 'max')),
)
GROUP_NAMES = (*(name for name, _ in OP_GROUPS), 'other')


def op_group(op: str) -> str:
    op = op.lower()
    return next((name for name, words in OP_GROUPS if any(w in op for w in words)), 'other')


def profile_training_step(model: nn.Module, data: dict) -> Dict[str, float]:
    """One training step after a warm-up: seconds of self CPU time per op group (torch.profiler)
    and the MiB the backbone's forward keeps for backward (distinct tensor storages saved by
    autograd, ``saved_bytes``)."""
    from torch.profiler import ProfilerActivity, profile
    train_step, _ = detector_steps(model, data)
    train_step()
    with counting_backbone_saves(model) as saved, profile(activities=[ProfilerActivity.CPU]) \
            as prof:
        train_step()
    groups = dict.fromkeys(GROUP_NAMES, 0.)
    for event in prof.key_averages():
        groups[op_group(event.key)] += event.self_cpu_time_total / 1e6
    return dict(groups, saved_mib=saved.bytes / 2**20)


@contextlib.contextmanager
def counting_backbone_saves(model: nn.Module) -> Iterator[SavedForBackward]:
    """Within the block, what the detector's backbone forward keeps for backward is counted
    (:class:`mmhvit.utils.SavedForBackward`); the rest of the step is not."""
    saved = SavedForBackward()
    backbone_forward = model.backbone.forward

    def forward_counting(*args, **kwargs):
        with saved:
            return backbone_forward(*args, **kwargs)

    model.backbone.forward = forward_counting
    try:
        yield saved
    finally:
        del model.backbone.forward  # the bound method of the class again


def section_detection_profile(args) -> List[str]:
    """Where a training step's CPU time goes, per op group, and what each backbone keeps for
    backward: the first of ``--det-algos``, batch 1, at ``--det-size``."""
    height, width = (int(v) for v in args.det_size.split('x'))
    algo = args.det_algos[0]
    rows = []
    for name in selected_backbones(args):
        log(f'detection profile: {DET_ALGOS[algo]} {name}')
        model = build_detector(algo, name)
        result = profile_training_step(model, synthetic_batch(1, height, width,
                                                              algo == 'mask-rcnn'))
        total = sum(result[group] for group in GROUP_NAMES)
        rows.append(f'| {name} | ' + ' | '.join(f'{result[g]:.3f}' for g in GROUP_NAMES) +
                    f' | {total:.3f} | {result["saved_mib"]:.1f} |')
        model = None
    return [
        f'## Where a detector\'s training step goes (CPU, fp32, {height}x{width})', '',
        f'{DET_ALGOS[algo]}, batch 1, the configs of the detection section: self CPU time '
        '(seconds) of one profiled training step after a warm-up step, the aten ops grouped by '
        'name (`mmhvit/analysis/benchmark/detection.py` `OP_GROUPS`; backward ops in their '
        'forward op\'s group), and the MiB of distinct tensors the backbone\'s forward saves for '
        'backward. The profiler\'s overhead inflates small ops: compare rows, not with the '
        'timings above.', '',
        '| backbone | ' + ' | '.join(GROUP_NAMES) + ' | total (s) | saved for backward (MiB) |',
        '|---' * (len(GROUP_NAMES) + 3) + '|', *rows, ''
    ]
