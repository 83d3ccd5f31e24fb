"""One GPU check of the five families, prepared to finish in under 8 minutes on one GPU.

    bash tools/analysis_tools/gpu_check.sh [--out work_dirs/gpu_check.md]   # on a GPU machine
    python tools/analysis_tools/gpu_check.py --dry-run                      # CPU, tiny sizes

Measures, for the backbones of our COCO configs (TransCNN-B, HAT-Net-S, NesT-T, TNT-S,
PyramidTNT-S; random weights):
  1. ``backbones``: fp32 and bf16-autocast forward and forward+backward latency and peak memory at
     224x224 batch 64 and 800x1344 batch 2, beside the detection comparison's reference backbones
     (Swin-T, PVTv2-b2, ResNet-50; timm's modules, all four outputs), with each 800x1344
     forward+backward as a ratio to Swin-T's;
  2. ``train``: 200 bf16 AMP training steps per family (the backbone, global pooling and a
     1000-way linear head, AdamW, 224x224 batch 64, random labels): images/s and every loss finite;
  3. ``detectors``: RetinaNet and Mask R-CNN (the COCO configs) bf16 AMP training throughput at
     800x1344 batch 2 on synthetic COCO-sized data (mmdet's demo inputs: 5 boxes/masks each).
     These need mmcv's compiled ops for the GPU; where mmcv has none (mmcv-lite) the section
     says so and the others still run;
  4. ``lean``: what one bf16-autocast forward keeps for backward (MiB of distinct tensor
     storages) and the forward+backward peak at 800x1344 batch 2, each family plain
     (``lean_backward=False``) and memory-lean, beside Swin-T.
Writes a Markdown page of the tables (for docs/benchmarks.md) and prints it. ``--dry-run`` runs the
same code on the CPU with tiny backbones, tiny sizes and 2 steps: what the tests run.
"""
import argparse
import math
import os
import os.path as osp
import sys
import time
from typing import List

import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import init_default_scope

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmhvit.analysis.benchmark.models import SCALING_ARCHS, log  # noqa: E402
from mmhvit.analysis.benchmark.models import build_backbone as build_family  # noqa: E402
from mmhvit.testing import TINY_ARCHS  # noqa: E402  (the dry run's tiny variants)
from mmhvit.utils import (  # noqa: E402
    PeakMemory,
    SavedForBackward,
    median_time,
    step_functions,
)

# family (mmhvit.analysis.benchmark's names; the COCO configs' arch is its SCALING_ARCHS one):
# (the COCO config's name part, the TINY_ARCHS key of the dry run)
FAMILIES = {
    'TransCNN': ('transcnn_b', 'TransCNN'),
    'HAT-Net': ('hatnet_s', 'HATNet'),
    'NesT': ('nest_t', 'NesT'),
    'TNT': ('tnt_s', 'TNT'),
    'PyramidTNT': ('ptnt_s', 'PyramidTNT'),
}
# The detection comparison's references (MMDetection's Swin-T / PVTv2-b2 / ResNet-50 configs) as
# timm builds them: mmdet's own modules import mmcv's compiled ops, which a bare GPU image lacks.
REFERENCES = {
    'Swin-T': ('swin_tiny_patch4_window7_224', dict(strict_img_size=False), True),
    'PVTv2-b2': ('pvt_v2_b2', {}, False),
    'ResNet-50': ('resnet50', dict(out_indices=(1, 2, 3, 4)), False),
}
BASELINE = 'Swin-T'
SECTIONS = ('backbones', 'train', 'detectors', 'lean')


def settings(dry_run: bool) -> dict:
    if dry_run:
        return dict(device='cpu', shapes=[(1, 64, 64), (1, 96, 160)], det_shape=(96, 160),
                    train_shape=(2, 64, 64), steps=2, repeats=1, warmup=0)
    return dict(device='cuda', shapes=[(64, 224, 224), (2, 800, 1344)], det_shape=(800, 1344),
                train_shape=(64, 224, 224), steps=200, repeats=10, warmup=3)


def build_backbone(name: str, dry_run: bool, image_size) -> nn.Module:
    """One of ours (a key of FAMILIES) or a reference (a key of REFERENCES)."""
    if name in REFERENCES:
        import timm
        model_name, kwargs, needs_size = REFERENCES[name]
        if needs_size:  # Swin's position tables are sized at construction
            kwargs = dict(kwargs, img_size=image_size)
        return timm.create_model(model_name, pretrained=False, features_only=True, **kwargs)
    tiny = FAMILIES[name][1]
    return (build_family(name, **TINY_ARCHS[tiny]) if dry_run else
            build_family(name, SCALING_ARCHS[name]))


def autocast(device: str, bf16: bool):
    return torch.autocast(device, dtype=torch.bfloat16, enabled=bf16)


def backbone_rows(name: str, s: dict, dry_run: bool, train_ms: dict):
    """Rows of one backbone; records its forward+backward ms per (size, dtype) in ``train_ms``."""
    rows = []
    for batch, height, width in s['shapes']:
        model = build_backbone(name, dry_run, (height, width)).to(s['device'])
        x = torch.randn(batch, 3, height, width, device=s['device'])
        for bf16 in (False, True):
            dtype = 'bf16' if bf16 else 'fp32'
            forward, forward_backward = step_functions(
                model, x, autocast(s['device'], bf16))
            figures = []
            for mode, fn in (('eval', forward), ('train', forward_backward)):
                getattr(model, mode)()
                with PeakMemory(s['device']) as mem:
                    seconds = median_time(fn, s['repeats'], s['warmup'], s['device'])
                figures += [seconds * 1e3, mem.peak / 2**30]
            train_ms[(name, height, width, dtype)] = figures[2]
            rows.append([name, f'{height}x{width}', batch, dtype, *figures])
        del model, x
        if s['device'] == 'cuda':
            torch.cuda.empty_cache()
    return rows


def format_backbone_rows(rows, train_ms: dict):
    lines = []
    for name, size, batch, dtype, fwd_ms, fwd_gib, train_ms_, train_gib in rows:
        height, width = map(int, size.split('x'))
        base = train_ms.get((BASELINE, height, width, dtype))
        ratio = f'{train_ms_ / base:.2f}' if base else ''
        lines.append(f'| {name} | {size} | {batch} | {dtype} | {fwd_ms:.1f} | {fwd_gib:.2f} '
                     f'| {train_ms_:.1f} | {train_gib:.2f} | {ratio} |')
    return lines


class Classifier(nn.Module):
    """Backbone, global average pooling of its last output, a linear head."""

    def __init__(self, backbone: nn.Module, channels: int, classes: int = 1000):
        super().__init__()
        self.backbone, self.head = backbone, nn.Linear(channels, classes)

    def forward(self, x):
        return self.head(self.backbone(x)[-1].mean((2, 3)))


def train_row(family: str, s: dict, dry_run: bool):
    """``s['steps']`` bf16 AMP AdamW steps of the family as a classifier; its row and losses."""
    batch, height, width = s['train_shape']
    backbone = build_backbone(family, dry_run, (height, width))
    model = Classifier(backbone, backbone.stage_channels[-1]).to(s['device']).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
    x = torch.randn(batch, 3, height, width, device=s['device'])
    labels = torch.randint(0, 1000, (batch,), device=s['device'])
    losses = []

    def step():
        with autocast(s['device'], True):
            loss = nn.functional.cross_entropy(model(x).float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        losses.append(loss.detach())

    for _ in range(s['warmup']):
        step()
    losses.clear()
    with PeakMemory(s['device']) as mem:
        seconds = median_time(step, s['steps'], 0, s['device'])
    values = [float(v) for v in losses]
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    verdict = 'all finite' if not bad else f'NOT finite at steps {bad[:5]}'
    row = (f'| {family} | {height}x{width} | {batch} | {batch / seconds:.0f} | '
           f'{seconds * 1e3:.1f} | {mem.peak / 2**30:.2f} | {len(values)} | {values[0]:.3f} | '
           f'{values[-1]:.3f} | {verdict} |')
    return row, bad


def mmcv_ops_missing(device: str):
    """Why mmcv's ops cannot run on ``device`` (None when they can)."""
    try:
        from mmcv.ops import RoIAlign, get_compiling_cuda_version  # noqa: F401
    except (ImportError, ModuleNotFoundError) as error:
        return f'mmcv has no compiled ops here ({error})'
    if device == 'cuda' and get_compiling_cuda_version() == 'not available':
        return 'mmcv was built without CUDA ops'
    return None


def build_detector(algo: str, family: str, dry_run: bool):
    from mmdet.registry import MODELS
    config_name, tiny = FAMILIES[family]
    cfg = Config.fromfile(osp.join(REPO, 'configs', f'{algo}_{config_name}_coco.py'))
    cfg.model.backbone.pop('init_cfg', None)  # random weights: nothing is downloaded
    if dry_run:
        cfg.model.backbone.update(TINY_ARCHS[tiny])
        channels = build_backbone(family, dry_run, None).stage_channels
        out_indices = cfg.model.backbone.get('out_indices', (0, 1, 2, 3))
        cfg.model.neck.in_channels = [channels[i] for i in out_indices]
    return MODELS.build(cfg.model)


def detector_row(algo: str, family: str, s: dict, dry_run: bool) -> str:
    """Throughput of one bf16-AMP training step on a fixed synthetic batch of 2 images."""
    from mmdet.testing import demo_mm_inputs

    from mmhvit.engine import AnyDeviceAmpOptimWrapper
    model = build_detector(algo, family, dry_run).to(s['device']).train()
    height, width = s['det_shape']
    data = demo_mm_inputs(2, [[3, height, width]] * 2, num_items=[5, 5], num_classes=80,
                          with_mask=algo == 'mask_rcnn')
    wrapper = AnyDeviceAmpOptimWrapper(
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4), dtype='bfloat16')
    with PeakMemory(s['device']) as mem:
        seconds = median_time(lambda: model.train_step(data, wrapper), s['repeats'],
                              s['warmup'], s['device'])
    return (f'| {algo} | {family} | {2 / seconds:.2f} | {seconds * 1e3:.0f} | '
            f'{mem.peak / 2**30:.2f} |')


def backbone_section(args, s) -> List[str]:
    lines = ['## Backbones (all four outputs), latency in ms and peak memory in GiB', '',
             f'fwd+bwd / {BASELINE}: the forward+backward time against {BASELINE}\'s at the '
             'same size and dtype.', '',
             '| backbone | size | batch | dtype | forward ms | forward GiB | fwd+bwd ms '
             f'| fwd+bwd GiB | fwd+bwd / {BASELINE} |', '|---' * 9 + '|']
    rows, train_ms = [], {}
    for name in [*args.references, *args.families]:  # the baseline first
        log(f'gpu_check: {name} backbone')
        rows += backbone_rows(name, s, args.dry_run, train_ms)
    return lines + format_backbone_rows(rows, train_ms)


def train_section(args, s, failures: List[str]) -> List[str]:
    batch, height, width = s['train_shape']
    lines = ['', '## bf16 AMP training steps: backbone + linear head, AdamW, '
             f'{height}x{width} batch {batch}, random labels', '',
             '| backbone | size | batch | images / s | ms / step | peak GiB | steps '
             '| first loss | last loss | losses |', '|---' * 10 + '|']
    for family in args.families:
        log(f'gpu_check: {s["steps"]} bf16 AMP training steps, {family}')
        row, bad = train_row(family, s, args.dry_run)
        lines.append(row)
        if bad:
            failures.append(f'non-finite training losses for {family} at steps {bad[:5]}')
    return lines


def detector_section(args, s) -> List[str]:
    height, width = s['det_shape']
    lines = ['', f'## Detector training, bf16 AMP, {height}x{width}, batch 2, synthetic data', '']
    missing = mmcv_ops_missing(s['device'])
    if missing:
        return lines + [f'Not measured: {missing}; RetinaNet and Mask R-CNN need them.']
    init_default_scope('mmdet')
    lines += ['| detector | backbone | images / s | ms / step | peak GiB |',
              '|---|---|---|---|---|']
    for family in args.families:
        for algo in ('retinanet', 'mask_rcnn'):
            log(f'gpu_check: {algo} {family} throughput')
            try:
                lines.append(detector_row(algo, family, s, args.dry_run))
            except RuntimeError as error:  # reported, not hidden: mmcv's nms and bf16
                lines.append(f'| {algo} | {family} | fails: '
                             f'{str(error).splitlines()[0]} | | |')
            if s['device'] == 'cuda':
                torch.cuda.empty_cache()
    return lines


def kept_for_backward(model: nn.Module, x: torch.Tensor, device: str):
    """(MiB of the distinct storages one bf16-autocast forward keeps for backward, peak GiB of
    that forward and its backward)."""
    model.train()
    with PeakMemory(device) as mem:
        with autocast(device, True), SavedForBackward() as saved:
            outs = model(x)
        sum(out.float().mean() for out in outs).backward()
    model.zero_grad(set_to_none=True)
    return saved.bytes / 2**20, mem.peak / 2**30


def lean_section(args, s) -> List[str]:
    batch, height, width = s['shapes'][-1]
    lines = ['', f'## Kept for backward, bf16 autocast, {height}x{width} batch {batch}', '',
             '| backbone | variant | saved for backward (MiB) | fwd+bwd peak GiB | saved / '
             f'{BASELINE} |', '|---' * 5 + '|']
    x = torch.randn(batch, 3, height, width, device=s['device'])
    figures = []
    for name in [BASELINE, *args.families]:
        model = build_backbone(name, args.dry_run, (height, width)).to(s['device'])
        for variant in (('plain', ) if name == BASELINE else ('plain', 'lean')):
            for module in model.modules():
                if hasattr(module, 'lean'):
                    module.lean = variant == 'lean'
            log(f'gpu_check: {name} {variant}, kept for backward')
            figures.append((name, variant, *kept_for_backward(model, x, s['device'])))
        del model
        if s['device'] == 'cuda':
            torch.cuda.empty_cache()
    base = figures[0][2]
    return lines + [f'| {name} | {variant} | {saved:.0f} | {peak:.2f} | {saved / base:.2f} |'
                    for name, variant, saved, peak in figures]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dry-run', action='store_true', help='CPU, tiny models and sizes')
    parser.add_argument('--families', nargs='+', default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument('--references', nargs='*', default=list(REFERENCES),
                        choices=list(REFERENCES), help='reference backbones (timm)')
    parser.add_argument('--sections', nargs='+', default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument('--out', default=osp.join(REPO, 'work_dirs', 'gpu_check.md'))
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit('gpu_check: no CUDA device here; use --dry-run for the CPU rehearsal')
    s = settings(args.dry_run)
    import mmhvit  # noqa: F401
    start = time.time()
    device_name = torch.cuda.get_device_name() if s['device'] == 'cuda' else 'CPU (dry run)'
    lines = [f'# GPU check: {device_name}, torch {torch.__version__}', '']
    failures = []
    if 'backbones' in args.sections:
        lines += backbone_section(args, s)
    if 'train' in args.sections:
        lines += train_section(args, s, failures)
    if 'detectors' in args.sections:
        lines += detector_section(args, s)
    if 'lean' in args.sections:
        lines += lean_section(args, s)
    lines += ['', f'Total wall time: {time.time() - start:.0f} s.', '']
    page = '\n'.join(lines)
    print(page)
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            f.write(page)
    if failures:
        raise SystemExit('gpu_check: ' + '; '.join(failures))
    return page


if __name__ == '__main__':
    main()
