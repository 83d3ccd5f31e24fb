"""One GPU check of the three families, prepared to finish in under 8 minutes on one GPU.

    bash tools/analysis_tools/gpu_check.sh [--out work_dirs/gpu_check.md]   # on a GPU machine
    python tools/analysis_tools/gpu_check.py --dry-run                      # CPU, tiny sizes

Measures, for TransCNN-B, NesT-T and TNT-S backbones (random weights):
  1. fp32 and bf16-autocast forward and forward+backward latency and peak memory at 224x224
     batch 64 and 800x1344 batch 2;
  2. RetinaNet and Mask R-CNN (the COCO configs) training throughput in images/s at 800x1344,
     batch 2, bf16 AMP, on synthetic COCO-sized data (mmdet's demo inputs: 5 boxes/masks each);
  3. 200 bf16 AMP RetinaNet training steps per family, asserting every loss is finite.
Writes a Markdown page of the tables (for docs/benchmarks.md) and prints it. ``--dry-run`` runs the
same code on the CPU with tiny backbones, tiny sizes and 3 steps: what the tests run.
"""
import argparse
import math
import os
import os.path as osp
import sys
import time

import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmhvit.analysis.benchmark.models import SCALING_ARCHS, log  # noqa: E402
from mmhvit.analysis.benchmark.models import build_backbone as build_family  # noqa: E402
from mmhvit.testing import TINY_ARCHS  # noqa: E402  (the dry run's tiny variants)
from mmhvit.utils import PeakMemory, median_time, step_functions  # noqa: E402

DETECTOR_CONFIGS = {'TransCNN': 'transcnn_b', 'NesT': 'nest_t', 'TNT': 'tnt_s'}
def settings(dry_run: bool) -> dict:
    if dry_run:
        return dict(device='cpu', shapes=[(1, 64, 64), (1, 96, 160)], det_shape=(96, 160),
                    steps=2, repeats=1, warmup=0)
    return dict(device='cuda', shapes=[(64, 224, 224), (2, 800, 1344)], det_shape=(800, 1344),
                steps=200, repeats=10, warmup=3)


def build_backbone(family: str, dry_run: bool):
    if dry_run:
        return build_family(family, **TINY_ARCHS[family])
    return build_family(family, SCALING_ARCHS[family])


def autocast(device: str, bf16: bool):
    return torch.autocast(device, dtype=torch.bfloat16, enabled=bf16)


def backbone_rows(family: str, s: dict, dry_run: bool):
    model = build_backbone(family, dry_run).to(s['device'])
    rows = []
    for batch, height, width in s['shapes']:
        x = torch.randn(batch, 3, height, width, device=s['device'])
        for bf16 in (False, True):
            forward, forward_backward = step_functions(
                model, x, autocast(s['device'], bf16))
            figures = []
            for mode, fn in (('eval', forward), ('train', forward_backward)):
                getattr(model, mode)()
                with PeakMemory(s['device']) as mem:
                    seconds = median_time(fn, s['repeats'], s['warmup'], s['device'])
                figures += [seconds * 1e3, mem.peak / 2**30]
            rows.append(f'| {family} | {height}x{width} | {batch} | {"bf16" if bf16 else "fp32"} '
                        f'| {figures[0]:.1f} | {figures[1]:.2f} | {figures[2]:.1f} '
                        f'| {figures[3]:.2f} |')
        del x
    return rows


def build_detector(algo: str, family: str, dry_run: bool):
    from mmdet.registry import MODELS
    name = f'{algo}_{DETECTOR_CONFIGS[family]}_coco.py'
    cfg = Config.fromfile(osp.join(REPO, 'configs', name))
    cfg.model.backbone.pop('init_cfg', None)  # random weights: nothing is downloaded
    if dry_run:
        cfg.model.backbone.update(TINY_ARCHS[family])
        channels = build_backbone(family, dry_run).stage_channels
        out_indices = cfg.model.backbone.get('out_indices', (0, 1, 2, 3))
        cfg.model.neck.in_channels = [channels[i] for i in out_indices]
    return MODELS.build(cfg.model)


def training_step_fn(model, s: dict, with_mask: bool):
    """One bf16-AMP training step on a fixed synthetic batch of 2 COCO-sized images."""
    from mmdet.testing import demo_mm_inputs

    from mmhvit.engine import AnyDeviceAmpOptimWrapper
    height, width = s['det_shape']
    data = demo_mm_inputs(2, [[3, height, width]] * 2, num_items=[5, 5], num_classes=80,
                          with_mask=with_mask)
    wrapper = AnyDeviceAmpOptimWrapper(optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                           dtype='bfloat16')
    losses = []

    def step():
        logged = model.train_step(data, wrapper)
        losses.append(sum(v.item() for k, v in logged.items() if 'loss' in k))

    return step, losses


def detector_rows(algo: str, family: str, s: dict, dry_run: bool):
    model = build_detector(algo, family, dry_run).to(s['device']).train()
    step, losses = training_step_fn(model, s, with_mask=algo == 'mask_rcnn')
    with PeakMemory(s['device']) as mem:
        seconds = median_time(step, s['repeats'], s['warmup'], s['device'])
    row = (f'| {algo} | {family} | {2 / seconds:.2f} | {seconds * 1e3:.0f} | '
           f'{mem.peak / 2**30:.2f} |')
    return row, model, step, losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dry-run', action='store_true', help='CPU, tiny models and sizes')
    parser.add_argument('--families', nargs='+', default=list(DETECTOR_CONFIGS),
                        choices=list(DETECTOR_CONFIGS))
    parser.add_argument('--out', default=osp.join(REPO, 'work_dirs', 'gpu_check.md'))
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit('gpu_check: no CUDA device here; use --dry-run for the CPU rehearsal')
    s = settings(args.dry_run)
    init_default_scope('mmdet')
    import mmhvit  # noqa: F401
    start = time.time()
    device_name = torch.cuda.get_device_name() if s['device'] == 'cuda' else 'CPU (dry run)'
    lines = [f'# GPU check: {device_name}, torch {torch.__version__}', '',
             '## Backbones (all four outputs), latency in ms and peak memory in GiB', '',
             '| backbone | size | batch | dtype | forward ms | forward GiB | fwd+bwd ms '
             '| fwd+bwd GiB |', '|---|---|---|---|---|---|---|---|']
    for family in args.families:
        log(f'gpu_check: {family} backbone')
        lines += backbone_rows(family, s, args.dry_run)
    height, width = s['det_shape']
    lines += ['', f'## Detector training, bf16 AMP, {height}x{width}, batch 2, synthetic data',
              '', '| detector | backbone | images / s | ms / step | peak GiB |',
              '|---|---|---|---|---|']
    finite = []
    for family in args.families:
        for algo in ('retinanet', 'mask_rcnn'):
            log(f'gpu_check: {algo} {family} throughput')
            try:
                row, model, step, losses = detector_rows(algo, family, s, args.dry_run)
            except RuntimeError as error:  # reported, not hidden: e.g. mmcv's nms and bf16
                lines.append(f'| {algo} | {family} | fails: {str(error).splitlines()[0]} | | |')
                continue
            lines.append(row)
            if algo == 'retinanet':
                log(f'gpu_check: {s["steps"]} bf16 AMP RetinaNet steps, {family}')
                losses.clear()
                for _ in range(s['steps']):
                    step()
                bad = [i for i, loss in enumerate(losses) if not math.isfinite(loss)]
                verdict = 'all finite' if not bad else f'NOT finite at steps {bad[:5]}'
                finite.append(f'| {family} | {len(losses)} | {losses[0]:.3f} | {losses[-1]:.3f} '
                              f'| {verdict} |')
                if bad:
                    raise SystemExit(f'gpu_check: non-finite RetinaNet losses for {family}: {bad}')
            del model, step
            if s['device'] == 'cuda':
                torch.cuda.empty_cache()
    lines += ['', '## bf16 AMP RetinaNet training steps', '',
              '| backbone | steps | first loss | last loss | losses |', '|---|---|---|---|---|',
              *finite, '', f'Total wall time: {time.time() - start:.0f} s.', '']
    page = '\n'.join(lines)
    print(page)
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            f.write(page)
    return page


if __name__ == '__main__':
    main()
