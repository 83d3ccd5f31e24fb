"""Measure the backbones: params/FLOPs against the papers, speed against timm, cost against input
size.

    python tools/analysis_tools/benchmark.py [--sections params speed scaling plugins]
        [--families TransCNN HAT-Net NesT TNT PyramidTNT] [--archs tiny ...]
        [--sizes 224x224 448x448 ...] [--plugins hmhsa generalized-attention nonlocal]
        [--plugin-size 800x1344] [--plugin-memory-cap 12]
        [--repeats 5] [--ratio-runs 5]
        [--det-algos retinanet mask-rcnn] [--det-backbones NesT-T Swin-T ...]
        [--det-size 800x1344] [--det-batches 1 2]  (detection, detection-profile, memory)
        [--memory-rows all|targets]  (memory)
        [--official-transcnn PATH/TransCNN.py] [--official-hatnet PATH/HAT_Net.py] [--threads 2]
        [--out docs/benchmarks.md]

Writes a Markdown page of tables (and PNG plots beside it), each section (each detector of the
detection section, each detector and batch of the memory section) as it completes, and prints
progress while it runs.
Sections:
  params   params and FLOPs (with / without the attention matrix products) of every arch's
           ImageNet classifier at its paper resolution, next to the official figures;
  speed    forward latency of our TransCNN-S, HAT-Net-S, NesT-T and TNT-S classifiers against
           the official TransCNN and HAT-Net (``--official-transcnn PATH`` to the released
           TransCNN.py, ``--official-hatnet PATH`` to the released HAT_Net.py, else our
           restatement of their computation) and timm's NesT / TNT, same converted weights,
           alternating A/B, the ratio as min / median / max over ``--ratio-runs`` runs;
           TransCNN-B against the same net with global attention;
  profile  (not in the default sections) per-op self CPU time of ours and each reference at the
           largest batch, from torch.profiler;
  scaling  forward and forward+backward time and peak memory of each backbone (all four outputs)
           against input size, next to a plain ViT-S/16 (and PyramidTNT-S with
           ``bias_chunk_size=4096`` when PyramidTNT is among the families);
  quickstart  (not in the default sections) seconds per training iteration of every quickstart
           RetinaNet, Mask R-CNN and UperNet config (``--quickstart-algos``,
           ``--quickstart-backbones``) against the same task's ResNet-18 config, on generated
           shapes data;
  plugins  (not in the default sections) MMDet's ResNet-50 alone and with the H-MHSA plugin,
           mmcv's GeneralizedAttention or NonLocal2d (``--plugins``) after conv3 of every block of
           stages 2-4: params, FLOPs, CPU forward latency and peak memory at --plugin-size, batch 1;
  detection  (not in the default sections) RetinaNet and Mask R-CNN (``--det-algos``) with each
           of our backbones and MMDet's Swin-T, PVTv2-b2 and ResNet-50 (``--det-backbones``),
           random weights, CPU fp32 at ``--det-size``, batches ``--det-batches``: training-step
           and inference time (all models alternating), peak memory (fresh processes), params,
           backbone FLOPs, ratios to Swin-T and the targets (each family <= 1.0x Swin-T, the
           best <= 0.8x);
  detection-profile  (not in the default sections) one profiled training step of the first
           ``--det-algos`` detector per ``--det-backbones`` backbone at ``--det-size``, batch 1:
           self CPU time per op group (attention, matmul, conv, norm, copies, ...) and the MiB
           the backbone's forward saves for backward;
  memory  (not in the default sections) per ``--det-algos`` detector and ``--det-batches`` batch,
           each ``--det-backbones`` backbone plain (``lean_backward=False``), memory-lean and
           memory-lean with ``with_cp`` (Swin-T: plain and ``with_cp``): the MiB its forward keeps
           for backward and the training peak (fresh processes), training-step time (the plain
           and lean rows alternating), ratios to Swin-T and to the plain row; with
           ``--memory-rows targets`` only the rows the targets read.
"""
import argparse
import datetime
import os
import os.path as osp
import platform
import sys
from typing import Iterator, List

import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmhvit.analysis.benchmark import (  # noqa: E402
    detection,
    memory,
    params,
    plugins,
    quickstart_speed,
    scaling,
    speed,
)
from mmhvit.analysis.benchmark.models import FAMILIES, SCALING_SIZES, log  # noqa: E402

SECTIONS = ['params', 'speed', 'profile', 'scaling', 'quickstart', 'plugins', 'detection',
            'detection-profile', 'memory']


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sections', nargs='+', default=['params', 'speed', 'scaling'],
                        choices=SECTIONS)
    parser.add_argument('--families', nargs='+', default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument('--archs', nargs='+', help='only these arch names in the params section')
    parser.add_argument('--sizes', nargs='+', default=list(SCALING_SIZES),
                        help='HxW sizes of the scaling section')
    parser.add_argument('--batches', nargs='+', type=int, default=[1, 8])
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--ratio-runs', type=int, default=5,
                        help='speed section: runs of alternating A/B timing per comparison')
    parser.add_argument('--official-transcnn', metavar='PATH',
                        help='the released TransCNN.py (yun-liu/HAT-Net) to time against; '
                        'default: our restatement of its computation '
                        '(mmhvit.testing.OfficialTransCNN)')
    parser.add_argument('--official-hatnet', metavar='PATH',
                        help='the released HAT_Net.py (yun-liu/HAT-Net) to time against; '
                        'default: our restatement of its computation '
                        '(mmhvit.testing.OfficialHATNet)')
    parser.add_argument('--threads', type=int, default=2, help='CPU threads (fixed)')
    parser.add_argument('--no-vit', dest='with_vit', action='store_false',
                        help='leave the ViT-S/16 baseline out of the scaling section')
    parser.add_argument('--quickstart-algos', nargs='+',
                        default=list(quickstart_speed.QUICKSTART_ALGOS),
                        choices=list(quickstart_speed.QUICKSTART_ALGOS),
                        help='tasks of the quickstart section')
    parser.add_argument('--quickstart-backbones', nargs='+',
                        default=list(quickstart_speed.QUICKSTART_BACKBONES),
                        choices=list(quickstart_speed.QUICKSTART_BACKBONES),
                        help='backbones of the quickstart section (r18, the reference, always)')
    parser.add_argument('--plugins', nargs='+', default=list(plugins.PLUGIN_NAMES),
                        choices=list(plugins.PLUGIN_NAMES),
                        help='plugins of the plugins section (the plain ResNet-50, the reference, '
                        'always)')
    parser.add_argument('--plugin-size', default='800x1344', help='HxW of the plugins section')
    parser.add_argument('--plugin-memory-cap', type=float, default=12.,
                        help='GiB of address space for each model of the plugins section')
    parser.add_argument('--det-algos', nargs='+', default=list(detection.DET_ALGOS),
                        choices=list(detection.DET_ALGOS),
                        help='detectors of the detection section')
    parser.add_argument('--det-backbones', nargs='+', default=list(detection.DET_BACKBONES),
                        choices=list(detection.DET_BACKBONES),
                        help='backbones of the detection section')
    parser.add_argument('--det-size', default='800x1344', help='HxW of the detection section')
    parser.add_argument('--det-batches', nargs='+', type=int, default=[1, 2],
                        help='batch sizes of the detection section')
    parser.add_argument('--memory-rows', default='all', choices=list(memory.MEMORY_ROWS),
                        help="the memory section's rows: every technique's, or only those its "
                        'targets read (plain, lean, lean + with_cp; Swin-T plain)')
    parser.add_argument('--out', default=osp.join(REPO, 'docs', 'benchmarks.md'))
    args = parser.parse_args(argv)
    sizes = [('--sizes', size) for size in args.sizes]
    for flag, size in [*sizes, ('--plugin-size', args.plugin_size), ('--det-size', args.det_size)]:
        parts = size.split('x')
        if len(parts) != 2 or not all(p.isdigit() and int(p) >= 32 for p in parts):
            parser.error(f'{flag} takes HxW with H, W >= 32, got {size!r}')
    return args


def scaling_lines(args, stem: str) -> List[str]:
    """The scaling section and its plot (``STEM_scaling_cpu.png`` beside the page)."""
    lines, points = scaling.section_scaling(args)
    png = f'{stem}_scaling_cpu.png'
    scaling.plot_scaling(points, png, 'CPU, fp32, batch 1')
    return lines + [f'![CPU scaling]({osp.basename(png)})', '']


def page_chunks(args) -> Iterator[List[str]]:
    """The page's lines, a section at a time (the detection section a detector at a time)."""
    stem = osp.splitext(args.out)[0]
    writers = {
        'params': params.section_params, 'speed': speed.section_speed,
        'profile': speed.section_profile, 'scaling': lambda a: scaling_lines(a, stem),
        'quickstart': quickstart_speed.section_quickstart,
        'plugins': plugins.section_plugins,
        'detection-profile': detection.section_detection_profile,
    }
    cpu_name = platform.processor() or platform.machine()
    yield [
        '# Benchmarks', '',
        f'Measured {datetime.date.today().isoformat()} with `tools/analysis_tools/benchmark.py '
        f'{" ".join(sys.argv[1:])}`: torch {torch.__version__}, {cpu_name}, '
        f'{args.threads} CPU threads.', ''
    ]
    # The page's order, whatever the order on the command line.
    for section in (s for s in SECTIONS if s in args.sections):
        if section == 'detection':  # a table per detector, each written as it completes
            yield from detection.section_detection(args)
        elif section == 'memory':  # a table per detector and batch, the same
            yield from memory.section_memory(args)
        else:
            yield writers[section](args)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    # Written as each part completes: a run that dies late keeps what it measured.
    with open(args.out, 'w') as f:
        for lines in page_chunks(args):
            f.write('\n'.join(lines) + '\n')
            f.flush()
            log(f'wrote {args.out} up to {lines[0][:60]!r}')
    log(f'wrote {args.out}: complete')


if __name__ == '__main__':
    main()
