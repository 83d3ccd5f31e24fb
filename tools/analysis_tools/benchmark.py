"""Measure the backbones: params/FLOPs against the papers, speed against timm, cost against input
size.

    python tools/analysis_tools/benchmark.py [--sections params speed scaling gpu plugins]
        [--families TransCNN NesT TNT PyramidTNT] [--archs tiny ...] [--sizes 224x224 448x448 ...]
        [--plugin-size 800x1344] [--plugin-memory-cap 12] [--repeats 5] [--ratio-runs 5]
        [--official-transcnn PATH/TransCNN.py] [--threads 2]
        [--out docs/benchmarks.md]

Writes a Markdown page of tables (and PNG plots beside it) and prints progress while it runs.
Sections:
  params   params and FLOPs (with / without the attention matrix products) of every arch's
           ImageNet classifier at its paper resolution, next to the official figures;
  speed    forward latency of our TransCNN-S, NesT-T and TNT-S classifiers against the official
           TransCNN (``--official-transcnn PATH`` to the released TransCNN.py, else our
           restatement of its computation) and timm's NesT / TNT, same converted weights,
           alternating A/B, the ratio as min / median / max over ``--ratio-runs`` runs;
           TransCNN-B against the same net with global attention;
  profile  (not in the default sections) per-op self CPU time of ours and each reference at the
           largest batch, from torch.profiler;
  scaling  forward and forward+backward time and peak memory of each backbone (all four outputs)
           against input size, next to a plain ViT-S/16 (and PyramidTNT-S with
           ``bias_chunk_size=4096`` when PyramidTNT is among the families);
  gpu      the speed and scaling tables on the GPU at fp32 and bf16 autocast, plus RetinaNet
           training throughput at 800x1333, batch 2 (only when CUDA is available);
  quickstart  (not in the default sections) seconds per training iteration of every quickstart
           RetinaNet, Mask R-CNN and UperNet config against the same task's ResNet-18 config,
           on generated shapes data;
  plugins  (not in the default sections) MMDet's ResNet-50 alone and with the H-MHSA plugin,
           mmcv's GeneralizedAttention or NonLocal2d after conv3 of every block of stages 2-4:
           params, FLOPs, CPU forward latency and peak memory at --plugin-size, batch 1.
"""
import argparse
import copy
import datetime
import gc
import os
import os.path as osp
import platform
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import init_default_scope

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmhvit.models.converters.files import convert_file  # noqa: E402
from mmhvit.utils import count_flops, count_params  # noqa: E402

# Official figures (../shared/docs/REFERENCE.md; papers): params in M with a 1000-class head,
# GFLOPs as the papers count them, ImageNet top-1.
FAMILIES = {
    'TransCNN': dict(
        config='configs/transcnn_b_in1k.py', size=256, type='mmhvit.TransCNN',
        archs={'tiny': (13.316, None, 80.4), 'small': (26.539, None, 83.1),
               'medium': (48.323, None, 83.8), 'large': (80.033, None, 84.2)}),
    'NesT': dict(
        config='configs/nest_t_in1k.py', size=224, type='mmhvit.NesT',
        archs={'tiny': (17.06, 5.8, 81.5), 'small': (38.35, 10.4, 83.3),
               'base': (67.72, 17.9, 83.8)}),
    'TNT': dict(
        config='configs/tnt_s_in1k.py', size=224, type='mmhvit.TNT',
        archs={'tiny': (6.1, 1.4, 73.9), 'small': (23.77, 5.2, 81.5),
               'base': (65.43, 14.1, 82.9)}),
    'PyramidTNT': dict(
        config='configs/ptnt_s_in1k.py', size=256, arch_sizes={'tiny': 192},
        type='mmhvit.PyramidTNT',
        archs={'tiny': (10.6, 0.6, 75.2), 'small': (32.0, 3.3, 82.0),
               'medium': (85.0, 8.2, 83.5), 'base': (157.0, 16.0, 84.1)}),
}
SCALING_SIZES = ('224x224', '448x448', '640x640', '800x1344', '1024x1024')
SCALING_ARCHS = {'TransCNN': 'base', 'NesT': 'tiny', 'TNT': 'small', 'PyramidTNT': 'small'}
# PyramidTNT-S with its relative_pos bias made (and attended) 4096 queries at a time.
PTNT_CHUNKED = 'PyramidTNT-small, bias_chunk_size=4096'


def log(message: str) -> None:
    print(f'[benchmark {time.strftime("%H:%M:%S")}] {message}', flush=True)


# --- models ---------------------------------------------------------------------------------
def classifier_config(family: str, arch) -> Config:
    cfg = Config.fromfile(osp.join(REPO, FAMILIES[family]['config']))
    cfg.model.backbone.arch = arch
    cfg.model.backbone.pop('init_cfg', None)
    return cfg


def build_classifier(family: str, arch) -> nn.Module:
    """The MMPretrain ImageClassifier of the ImageNet config, with ``arch`` and a matching head."""
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    cfg = classifier_config(family, arch)
    backbone = MODELS.build(copy.deepcopy(cfg.model.backbone))
    size = FAMILIES[family]['size']
    with torch.no_grad():
        feature = backbone(torch.zeros(1, 3, size, size))[-1]
    cfg.model.head.in_channels = feature.shape[1]
    model = MODELS.build(cfg.model).eval()
    model.init_weights()
    return model


def build_backbone(family: str, arch, **overrides) -> nn.Module:
    from mmhvit.registry import MODELS
    return MODELS.build(dict(type=FAMILIES[family]['type'], arch=arch, **overrides))


class TensorMode(nn.Module):
    """An MMPretrain classifier as a plain image -> logits module."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x, mode='tensor')


def official_transcnn(path: Optional[str]) -> nn.Module:
    """TransCNN-Small as the official code builds it: the released ``TransCNN.py`` at ``path``
    (its ``TransCNN_Small``), or without a path our restatement of its computation
    (``official_transcnn.py``, official key names)."""
    import importlib.util
    if path is None:
        sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
        from official_transcnn import OfficialTransCNN

        from mmhvit.models.backbones.transcnn import TransCNN
        return OfficialTransCNN(TransCNN.arch_zoo['small'])
    spec = importlib.util.spec_from_file_location('official_transcnn_release', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TransCNN_Small()


def randomize_norms(model: nn.Module) -> None:
    """Non-trivial BatchNorm statistics, so that a mis-loaded norm shows in the logits."""
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            for tensor, (low, high) in ((m.running_mean, (-.3, .3)), (m.running_var, (.5, 2.)),
                                        (m.weight.data, (.5, 1.5)), (m.bias.data, (-.3, .3))):
                tensor.copy_(torch.rand(tensor.shape, generator=gen) * (high - low) + low)


def reference_pair(family: str, official_path: Optional[str] = None):
    """(reference model, our classifier with its weights converted by our converter tool, input
    side, reference name): timm's NesT-T / TNT-S, the official TransCNN-Small."""
    if family == 'TransCNN':
        reference = official_transcnn(official_path).eval()
        randomize_norms(reference)
        name = 'official TransCNN.py' if official_path else 'official equations (restated)'
        arch, size = 'small', 256
    else:
        import timm
        timm_name, arch = {'NesT': ('nest_tiny_jx', 'tiny'),
                           'TNT': ('tnt_s_patch16_224', 'small')}[family]
        reference = timm.create_model(timm_name, pretrained=False).eval()
        name, size = 'timm', 224
    ours = build_classifier(family, arch)
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(reference.state_dict(), osp.join(tmp, 'reference.pth'))
        convert_file(family.lower(), osp.join(tmp, 'reference.pth'), osp.join(tmp, 'ours.pth'))
        state = torch.load(osp.join(tmp, 'ours.pth'), map_location='cpu')['state_dict']
    missing, unexpected = ours.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f'converted {family} does not fit: {missing} {unexpected}')
    return reference, TensorMode(ours).eval(), size, name


class PlainViT(nn.Module):
    """ViT-S/16 (timm) returning its stride-16 token map: the isotropic baseline for scaling."""

    def __init__(self):
        super().__init__()
        import timm
        self.vit = timm.create_model('vit_small_patch16_224', pretrained=False,
                                     dynamic_img_size=True, dynamic_img_pad=True, num_classes=0)

    def forward(self, x):
        return self.vit.forward_features(x)


# --- measuring ------------------------------------------------------------------------------
def synchronize(device: str) -> None:
    if device == 'cuda':
        torch.cuda.synchronize()


def median_time(fn: Callable, repeats: int, warmup: int, device: str) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def alternating_times(fns: List[Callable], repeats: int, warmup: int, device: str) -> List[float]:
    """Median time of each function, run A, B, A, B... so drift hits both alike."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, bucket in zip(fns, times):
            synchronize(device)
            start = time.perf_counter()
            fn()
            synchronize(device)
            bucket.append(time.perf_counter() - start)
    return [statistics.median(bucket) for bucket in times]


class PeakMemory:
    """Peak memory of a block above its start: the CUDA allocator's peak, or on the CPU the
    process's resident-set high-water mark (Linux VmHWM).

    The CPU figure only means something in a fresh process (freed memory stays resident and is
    reused), so CPU measurements run in a subprocess each (:func:`cpu_peak_memory`).
    """

    def __init__(self, device: str):
        self.device = device

    @staticmethod
    def status(field: str) -> int:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(f'{field} not in /proc/self/status')

    def __enter__(self):
        gc.collect()
        if self.device == 'cuda':
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base = self.status('VmRSS:')
        return self

    def __exit__(self, *exc):
        if self.device == 'cuda':
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self.peak = self.status('VmHWM:') - self.base


def scaling_models(families) -> Dict[str, Callable[[], nn.Module]]:
    models = {
        f'{family}-{SCALING_ARCHS[family]}': (lambda f=family: build_backbone(f, SCALING_ARCHS[f]))
        for family in families
    }
    if 'PyramidTNT' in families:
        models[PTNT_CHUNKED] = lambda: build_backbone('PyramidTNT', 'small', bias_chunk_size=4096)
    models['ViT-S/16 (timm)'] = PlainViT
    return models


def step_functions(model: nn.Module, x: torch.Tensor, autocast):

    def forward():
        with torch.no_grad(), autocast:
            model(x)

    def forward_backward():
        with autocast:
            out = model(x)
            out = out if isinstance(out, (tuple, list)) else [out]
            loss = sum(o.float().mean() for o in out)
        loss.backward()

    return forward, forward_backward


def memory_probe(name: str, size: str) -> None:
    """Subprocess entry: print the CPU peak memory (bytes) of one forward and one training step."""
    import json
    torch.manual_seed(0)
    model = scaling_models(FAMILIES)[name]()
    height, width = (int(v) for v in size.split('x'))
    x = torch.randn(1, 3, height, width)
    forward, forward_backward = step_functions(model, x, torch.autocast('cpu', enabled=False))
    model.eval()
    with PeakMemory('cpu') as mem_fwd:
        forward()
    model.train()
    with PeakMemory('cpu') as mem_bwd:  # VmHWM never drops: this reads max(forward, training)
        forward_backward()
    print(json.dumps(dict(forward=mem_fwd.peak, forward_backward=mem_bwd.peak)))


def cpu_peak_memory(name: str, size: str, threads: int):
    import json
    import subprocess
    proc = subprocess.run(
        [sys.executable, osp.abspath(__file__), '--memory-probe', name, size, '--threads',
         str(threads)], capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result['forward'], result['forward_backward']


# --- sections -------------------------------------------------------------------------------
def section_params(args) -> List[str]:
    rows = []
    for family in args.families:
        spec = FAMILIES[family]
        for arch, (params_ref, flops_ref, top1) in spec['archs'].items():
            if args.archs and arch not in args.archs:
                continue
            size = spec.get('arch_sizes', {}).get(arch, spec['size'])
            log(f'params/FLOPs: {family}-{arch} at {size}x{size}')
            model = TensorMode(build_classifier(family, arch)).eval()
            x = torch.zeros(1, 3, size, size)
            with torch.no_grad():
                flops = count_flops(model, (x, ), with_attention=False) / 1e9
                flops_attn = count_flops(model, (x, ), with_attention=True) / 1e9
            params = count_params(model) / 1e6
            rows.append(f'| {family}-{arch} | {size} | {params:.3f} | {params_ref} | '
                        f'{flops:.2f} | {flops_attn:.2f} | {flops_ref or "—"} | {top1} |')
            del model
    return [
        '## Params and FLOPs of the ImageNet classifiers', '',
        'FLOPs are multiply-adds of one image, counted by MMEngine\'s counter; "without attn" '
        'leaves '
        'out the two matrix products of attention (QK^T and AV), as the official TransCNN figures '
        'do; "with attn" counts them. Official figures from the papers (TransCNN publishes none '
        'at 256 that we could confirm: "—").', '',
        '| model | input | params (M) | official params (M) | GFLOPs without attn | '
        'GFLOPs with attn | official GFLOPs | official top-1 |',
        '|---|---|---|---|---|---|---|---|', *rows, ''
    ]


def ratio_runs(ours: Callable, reference: Callable, args, device: str):
    """``args.ratio_runs`` runs of A/B-alternating timing: (median ms of ours, of the reference,
    [ours / reference of each run]); the spread of the ratios shows the noise."""
    ratios, t_ours, t_ref = [], [], []
    for _ in range(args.ratio_runs):
        a, b = alternating_times([ours, reference], args.repeats, args.warmup, device)
        ratios.append(a / b)
        t_ours.append(a)
        t_ref.append(b)
    return statistics.median(t_ours) * 1e3, statistics.median(t_ref) * 1e3, ratios


def spread(ratios: List[float]) -> str:
    return f'{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}'


def section_speed(args, device: str = 'cpu', dtype: Optional[torch.dtype] = None) -> List[str]:
    rows = []
    autocast = (torch.autocast(device_type=device, dtype=dtype) if dtype else
                torch.autocast(device_type=device, enabled=False))
    for family in [f for f in ('TransCNN', 'NesT', 'TNT') if f in args.families]:
        reference, ours, size, ref_name = reference_pair(family, args.official_transcnn)
        reference, ours = reference.to(device), ours.to(device)
        label = {'TransCNN': 'TransCNN-S', 'NesT': 'NesT-T', 'TNT': 'TNT-S'}[family]
        for batch in args.batches:
            log(f'speed: {label} vs {ref_name}, batch {batch}, {device}, {dtype or "fp32"}')
            x = torch.randn(batch, 3, size, size, device=device)
            with torch.no_grad(), autocast:
                diff = (ours(x).float() - reference(x).float()).abs().max().item()
                t_ours, t_ref, ratios = ratio_runs(lambda: ours(x), lambda: reference(x), args,
                                                   device)
            rows.append(f'| {label} vs {ref_name}, {size} | {batch} | {t_ours:.1f} | '
                        f'{t_ref:.1f} | {spread(ratios)} | {diff:.1e} |')
        reference = ours = None  # free them before the next family
    if 'TransCNN' in args.families:
        arch = SCALING_ARCHS['TransCNN']
        hmhsa = build_backbone('TransCNN', arch).eval().to(device)
        # Grid 1 everywhere: every stage runs plain global attention (as TransCNN's stage 4).
        settings = dict(hmhsa.arch_zoo[arch], grid_sizes=[1, 1, 1, 1])
        plain = build_backbone('TransCNN', settings).eval().to(device)
        for batch in args.batches:
            log(f'speed: TransCNN H-MHSA vs global attention, batch {batch}, {device}')
            x = torch.randn(batch, 3, 256, 256, device=device)
            with torch.no_grad(), autocast:
                t_ours, t_ref, ratios = ratio_runs(lambda: hmhsa(x), lambda: plain(x), args,
                                                   device)
            rows.append(f'| TransCNN-B (H-MHSA) vs global attention, 256 | {batch} | '
                        f'{t_ours:.1f} | {t_ref:.1f} | {spread(ratios)} | — |')
    title = f'{device.upper()}, {"bf16 autocast" if dtype else "fp32"}'
    return [
        f'## Speed against the reference ({title})', '',
        f'Forward latency of the ImageNet classifiers on the same weights (the reference\'s, '
        f'converted by our converter tool). One run: {args.repeats} forwards of each model after '
        f'{args.warmup} warm-up forwards, the two alternating A/B; {args.ratio_runs} runs. '
        '"ours / reference" is the ratio of the two medians of each run, as min / median / max '
        'over the runs (its spread is the noise); the ms columns are the medians over the runs; '
        '"max abs diff" is the largest logit difference. Target: ours / reference ≤ 0.9.', '',
        '| comparison | batch | ours (ms) | reference (ms) | ours / reference (min / median / max) '
        '| max abs diff |', '|---|---|---|---|---|---|', *rows, ''
    ]


def op_times(model: nn.Module, x: torch.Tensor, repeats: int) -> Dict[str, float]:
    """Self CPU time (ms per forward) of each aten op, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    with torch.no_grad():
        model(x)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(repeats):
                model(x)
    return {e.key: e.self_cpu_time_total / 1e3 / repeats for e in prof.key_averages()}


def section_profile(args) -> List[str]:
    """Where the time goes: per-op self CPU time of ours and the reference, largest first."""
    lines = ['## Where the CPU time goes (torch.profiler, fp32)', '',
             f'Self CPU time per forward of each aten op, mean of {args.repeats} profiled forwards '
             'after one warm-up, batch ' + str(max(args.batches)) + '; ops are listed while '
             'either model spends at least 1% of its time in them. The profiler\'s own overhead '
             'inflates small ops: compare the two columns, not with the latencies above.', '']
    for family in [f for f in ('TransCNN', 'NesT', 'TNT') if f in args.families]:
        reference, ours, size, ref_name = reference_pair(family, args.official_transcnn)
        log(f'profile: {family} vs {ref_name}')
        x = torch.randn(max(args.batches), 3, size, size)
        times = [op_times(ours, x, args.repeats), op_times(reference, x, args.repeats)]
        totals = [sum(t.values()) for t in times]
        ops = sorted(set(times[0]) | set(times[1]),
                     key=lambda op: -max(times[0].get(op, 0), times[1].get(op, 0)))
        rows = [f'| {op} | {times[0].get(op, 0):.1f} | {times[1].get(op, 0):.1f} |' for op in ops
                if max(t.get(op, 0) / total for t, total in zip(times, totals)) >= .01]
        lines += [f'### {family}: ours vs {ref_name}', '',
                  '| op | ours (ms) | reference (ms) |', '|---|---|---|', *rows,
                  f'| **total** | **{totals[0]:.1f}** | **{totals[1]:.1f}** |', '']
        reference = ours = None
    return lines


def section_scaling(args, device: str = 'cpu', dtype: Optional[torch.dtype] = None):
    models = scaling_models(args.families)
    if not args.with_vit:
        models.pop('ViT-S/16 (timm)')
    autocast = (torch.autocast(device_type=device, dtype=dtype) if dtype else
                torch.autocast(device_type=device, enabled=False))
    rows, points = [], {}
    for name, make in models.items():
        model = make().to(device)
        for size in args.sizes:
            height, width = (int(v) for v in size.split('x'))
            log(f'scaling: {name} at {height}x{width}, {device}, {dtype or "fp32"}')
            x = torch.randn(1, 3, height, width, device=device)
            forward, forward_backward = step_functions(model, x, autocast)
            model.eval()
            with PeakMemory(device) as mem_fwd:
                t_fwd = median_time(forward, args.repeats, 1, device)
            model.train()
            with PeakMemory(device) as mem_bwd:
                t_bwd = median_time(forward_backward, max(1, args.repeats // 2), 1, device)
            model.zero_grad(set_to_none=True)
            peaks = ((mem_fwd.peak, mem_bwd.peak) if device == 'cuda' else
                     cpu_peak_memory(name, size, args.threads))
            rows.append(f'| {name} | {height}x{width} | {t_fwd * 1e3:.0f} | {t_bwd * 1e3:.0f} | '
                        f'{peaks[0] / 2**20:.0f} | {peaks[1] / 2**20:.0f} |')
            points.setdefault(name, []).append((height * width, peaks[1] / 2**20, t_bwd * 1e3))
        del model
        gc.collect()
    lines = [
        f'## Cost against input size ({device.upper()}, {"bf16 autocast" if dtype else "fp32"})',
        '',
        'Batch 1, the backbones in multi-scale mode (all four outputs); ViT-S/16 is timm\'s, with '
        'dynamic image size. Peak memory: ' +
        ('the CUDA allocator\'s peak above the model.' if device == 'cuda' else
         'the resident-set peak (Linux VmHWM) of a fresh process above its level with the model '
         'built; forward+backward is the peak of one training step.'),
        'Linearity: the 1024² figure over the linear extrapolation from 224² '
        '(1.0 = exactly linear in pixels; target ≤ 1.1 for TransCNN and NesT).', '',
        '| backbone | input | forward (ms) | forward+backward (ms) | peak memory forward (MiB) | '
        'peak memory forward+backward (MiB) |', '|---|---|---|---|---|---|', *rows, ''
    ]
    lines += linearity_table(points)
    return lines, points


def linearity_table(points) -> List[str]:
    rows = []
    for name, series in points.items():
        (p0, m0, t0), (p1, m1, t1) = min(series), max(series)
        if p1 == p0 or m0 <= 0:
            continue
        rows.append(f'| {name} | {m1 / (m0 * p1 / p0):.2f} | {t1 / (t0 * p1 / p0):.2f} |')
    if not rows:
        return []
    return ['| backbone | memory: largest / linear extrapolation | time: largest / linear '
            'extrapolation |', '|---|---|---|', *rows, '']


def plot_scaling(points, out_png: str, title: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, series in points.items():
        series = sorted(series)
        pixels = [p / 1e6 for p, _, _ in series]
        axes[0].plot(pixels, [m for _, m, _ in series], 'o-', label=name)
        axes[1].plot(pixels, [t for _, _, t in series], 'o-', label=name)
    for ax, label in zip(axes, ('peak memory, forward+backward (MiB)',
                                'time, forward+backward (ms)')):
        ax.set_xlabel('megapixels')
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def section_gpu_training(args) -> List[str]:
    """RetinaNet training steps at 800x1333, batch 2, bf16 autocast, for each backbone."""
    from mmdet.registry import MODELS
    from mmdet.testing import demo_mm_inputs
    from mmengine.model import revert_sync_batchnorm

    import mmhvit  # noqa: F401
    init_default_scope('mmdet')
    rows = []
    for family, name in (('TransCNN', 'transcnn_b'), ('NesT', 'nest_t'), ('TNT', 'tnt_s'),
                         ('PyramidTNT', 'ptnt_s')):
        if family not in args.families:
            continue
        cfg = Config.fromfile(osp.join(REPO, 'configs', f'retinanet_{name}_coco.py'))
        cfg.model.backbone.pop('init_cfg', None)
        # One process: SyncBN (PyramidTNT's config) as BN, as MMEngine's Runner does.
        model = revert_sync_batchnorm(MODELS.build(cfg.model)).cuda().train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        data = demo_mm_inputs(2, [[3, 800, 1333]] * 2, num_items=[5, 5], num_classes=80)

        def step():
            batch = model.data_preprocessor(data, True)
            with torch.autocast('cuda', dtype=torch.bfloat16):
                losses = model(**batch, mode='loss')
            loss, _ = model.parse_losses(losses)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        log(f'gpu: RetinaNet {family} training steps')
        with PeakMemory('cuda') as mem:
            seconds = median_time(step, args.repeats, 3, 'cuda')
        rows.append(f'| RetinaNet + {family} | {2 / seconds:.1f} | {mem.peak / 2**30:.1f} |')
        model = optimizer = None  # free them before the next family
    return ['## RetinaNet training throughput (GPU, bf16 autocast, 800x1333, batch 2)', '',
            '| model | images / s | peak memory (GiB) |', '|---|---|---|', *rows, '']


# --- quickstart training speed ---------------------------------------------------------------
QUICKSTART_ALGOS = {'retinanet': '10e', 'mask-rcnn': '8e', 'upernet': '8e'}
QUICKSTART_BACKBONES = ('transcnn-q', 'hatnet-q', 'nest-q', 'tnt-q', 'ptnt-q', 'r18')


def quickstart_iteration_time(config: str, data_root: str, iterations: int, warmup: int) -> float:
    """Median seconds of one training iteration (``train_step``: forward, backward, optimiser
    step) of a quickstart config at its own batch size, on batches loaded beforehand."""
    from mmengine.runner import Runner
    cfg = Config.fromfile(config)
    cfg.work_dir = tempfile.mkdtemp(prefix='benchmark_quickstart_')
    cfg.experiment_name = 'benchmark_' + osp.splitext(osp.basename(config))[0]
    cfg.log_level = 'WARNING'
    cfg.train_dataloader.update(num_workers=0, persistent_workers=False)
    cfg.train_dataloader.dataset.data_root = data_root
    if cfg.model.backbone.get('init_cfg'):  # UperNet starts from its quickstart classifier
        cfg.model.backbone.init_cfg = None
    runner = Runner.from_cfg(cfg)
    optim_wrapper = runner.build_optim_wrapper(cfg.optim_wrapper)
    batches = []
    while len(batches) < iterations + warmup:
        batches += list(runner.train_dataloader)
    model = runner.model.train()
    times = []
    for index, batch in enumerate(batches[:iterations + warmup]):
        start = time.perf_counter()
        model.train_step(batch, optim_wrapper)
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def section_quickstart(args) -> List[str]:
    """s/iter of every quickstart detector / segmentor against its ResNet-18 config."""
    import subprocess
    data = tempfile.mkdtemp(prefix='benchmark_shapes_')
    subprocess.run([sys.executable, osp.join(REPO, 'tools', 'dataset_converters', 'make_shapes.py'),
                    '--out', data, '--train', '16', '--val', '4', '--seed', '1'], check=True,
                   capture_output=True)
    rows = []
    for algo in args.quickstart_algos:
        schedule = QUICKSTART_ALGOS[algo]
        seconds = {}
        for backbone in QUICKSTART_BACKBONES:
            config = osp.join(REPO, 'configs', 'quickstart',
                              f'{algo}_{backbone}_{schedule}_shapes.py')
            log(f'quickstart: {osp.basename(config)}')
            seconds[backbone] = quickstart_iteration_time(config, data + '/', args.repeats,
                                                          args.warmup)
        for backbone, value in seconds.items():
            rows.append(f'| {algo}_{backbone}_{schedule}_shapes | {value:.2f} | '
                        f'{value / seconds["r18"]:.2f} |')
    return [
        '## Quickstart training speed (CPU, fp32)', '',
        'Seconds per training iteration (MMEngine `train_step`: forward, loss, backward, AdamW '
        'step) of each quickstart config at its own batch size (8 images of 256 x 256) on the '
        f'generated shapes data, median of {args.repeats} iterations after {args.warmup} warm-up '
        'iterations, batches loaded beforehand (no data time); against the same task\'s '
        'ResNet-18 config.', '',
        '| config | s / iter | / ResNet-18 |', '|---|---|---|', *rows, ''
    ]


# --- attention plugins in ResNet-50 -----------------------------------------------------------
# The same places for every plugin: after conv3 of every bottleneck of stages 2-4 (13 blocks), where
# MMDet's ContextBlock / NonLocal configs put theirs. GeneralizedAttention takes MMDet's
# empirical_attention settings ('1111', 8 heads, keys at stride 2), the others their defaults.
RESNET_PLUGINS = {
    'ResNet-50': None,
    '+ H-MHSA (mmhvit.HMHSAPlugin)': dict(type='mmhvit.HMHSAPlugin', grid_size=8, ds_ratio=4),
    '+ GeneralizedAttention (mmcv)': dict(type='GeneralizedAttention', spatial_range=-1,
                                          num_heads=8, attention_type='1111', kv_stride=2),
    '+ NonLocal2d (mmcv)': dict(type='NonLocal2d'),
}


def build_plugin_resnet(name: str) -> nn.Module:
    """MMDet's ResNet-50 (all four outputs, as under an FPN) with the named plugin, eval mode."""
    from mmdet.registry import MODELS

    import mmhvit  # noqa: F401
    init_default_scope('mmdet')
    plugin = RESNET_PLUGINS[name]
    cfg = dict(type='ResNet', depth=50, out_indices=(0, 1, 2, 3), init_cfg=None)
    if plugin is not None:
        cfg['plugins'] = [dict(cfg=plugin, stages=(False, True, True, True),
                               position='after_conv3')]
    model = MODELS.build(cfg)
    model.eval()  # MMDet's ResNet.train() returns None
    return model


def plugin_probe(name: str, size: str, repeats: int, warmup: int, cap_gib: float) -> None:
    """Subprocess entry: print params, FLOPs, forward peak memory and latency of one ResNet as JSON.

    The address space is capped (``cap_gib``) so that a plugin whose attention matrices do not fit
    reports it instead of taking the shared machine's memory; an allocation over the cap fails in
    PyTorch's allocator and is reported as ``over_cap``.
    """
    import json
    import resource
    cap = int(cap_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    torch.manual_seed(0)
    model = build_plugin_resnet(name)
    height, width = (int(v) for v in size.split('x'))
    x = torch.randn(1, 3, height, width)
    result = dict(params=count_params(model))
    try:
        with torch.no_grad():
            with PeakMemory('cpu') as mem:
                model(x)
            result['memory'] = mem.peak
            result['latency'] = median_time(lambda: model(x), repeats, warmup, 'cpu')
            result['flops'] = count_flops(model, (x, ), with_attention=True)
    except (RuntimeError, MemoryError) as error:  # the allocator's "can't allocate memory"
        result['over_cap'] = str(error).splitlines()[0][:200]
    print(json.dumps(result))


def section_plugins(args) -> List[str]:
    import json
    import subprocess
    rows = []
    for name in RESNET_PLUGINS:
        log(f'plugins: {name} at {args.plugin_size}')
        proc = subprocess.run(
            [sys.executable, osp.abspath(__file__), '--plugin-probe', name, args.plugin_size,
             '--threads', str(args.threads), '--repeats', str(args.repeats), '--warmup',
             str(args.warmup), '--plugin-memory-cap', str(args.plugin_memory_cap)],
            capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        if 'over_cap' in r:
            log(f'plugins: {name} went over the {args.plugin_memory_cap} GiB cap: {r["over_cap"]}')
            over = f'> {args.plugin_memory_cap:g} GiB (over the cap)'
            rows.append(f'| {name} | {r["params"] / 1e6:.2f} | — | — | {over} |')
        else:
            rows.append(f'| {name} | {r["params"] / 1e6:.2f} | {r["flops"] / 1e9:.1f} | '
                        f'{r["latency"] * 1e3:.0f} | {r["memory"] / 2**20:.0f} |')
    height, width = args.plugin_size.split('x')
    return [
        f'## Attention plugins in ResNet-50 (CPU, fp32, {height}x{width}, batch 1)', '',
        'MMDet\'s ResNet-50 (all four outputs) alone and with one plugin after conv3 of every '
        'bottleneck of stages 2-4 (13 blocks): ours with its defaults (1/4 of the channels, 8 x 8 '
        'windows, keys pooled by 4, 64-channel heads), mmcv\'s GeneralizedAttention with MMDet\'s '
        '`attn1111` settings (8 heads, keys at stride 2) and NonLocal2d (embedded Gaussian, half '
        'the channels). FLOPs: multiply-adds with the attention products; latency: forward, median '
        f'of {args.repeats} after {args.warmup} warm-up; peak memory: the resident-set peak (Linux '
        'VmHWM) of one forward in a fresh process, above its level with the model built, the '
        f'process capped at {args.plugin_memory_cap:g} GiB of address space.', '',
        '| model | params (M) | GFLOPs | forward (ms) | peak memory forward (MiB) |',
        '|---|---|---|---|---|', *rows, ''
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sections', nargs='+', default=['params', 'speed', 'scaling', 'gpu'],
                        choices=['params', 'speed', 'profile', 'scaling', 'gpu', 'quickstart',
                                 'plugins'])
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
                        'default: our restatement of its computation (official_transcnn.py)')
    parser.add_argument('--threads', type=int, default=2, help='CPU threads (fixed)')
    parser.add_argument('--no-vit', dest='with_vit', action='store_false',
                        help='leave the ViT-S/16 baseline out of the scaling section')
    parser.add_argument('--quickstart-algos', nargs='+', default=list(QUICKSTART_ALGOS),
                        choices=list(QUICKSTART_ALGOS), help='tasks of the quickstart section')
    parser.add_argument('--plugin-size', default='800x1344', help='HxW of the plugins section')
    parser.add_argument('--plugin-memory-cap', type=float, default=12.,
                        help='GiB of address space for each model of the plugins section')
    parser.add_argument('--out', default=osp.join(REPO, 'docs', 'benchmarks.md'))
    parser.add_argument('--memory-probe', nargs=2, metavar=('MODEL', 'HxW'),
                        help=argparse.SUPPRESS)  # internal: one CPU memory measurement
    parser.add_argument('--plugin-probe', nargs=2, metavar=('MODEL', 'HxW'),
                        help=argparse.SUPPRESS)  # internal: one model of the plugins section
    args = parser.parse_args()
    if args.memory_probe:
        torch.set_num_threads(args.threads)
        memory_probe(*args.memory_probe)
        return
    if args.plugin_probe:
        torch.set_num_threads(args.threads)
        plugin_probe(*args.plugin_probe, args.repeats, args.warmup, args.plugin_memory_cap)
        return
    for size in [*args.sizes, args.plugin_size]:
        parts = size.split('x')
        if len(parts) != 2 or not all(p.isdigit() and int(p) >= 32 for p in parts):
            parser.error(f'--sizes takes HxW with H, W >= 32, got {size!r}')
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    stem = osp.splitext(args.out)[0]

    cpu_name = platform.processor() or platform.machine()
    lines = [
        '# Benchmarks', '',
        f'Measured {datetime.date.today().isoformat()} with `tools/analysis_tools/benchmark.py '
        f'{" ".join(sys.argv[1:])}`: torch {torch.__version__}, {cpu_name}, '
        f'{args.threads} CPU threads.', ''
    ]
    if 'params' in args.sections:
        lines += section_params(args)
    if 'speed' in args.sections:
        lines += section_speed(args)
    if 'profile' in args.sections:
        lines += section_profile(args)
    if 'scaling' in args.sections:
        scaling, points = section_scaling(args)
        plot_scaling(points, stem + '_scaling_cpu.png', 'CPU, fp32, batch 1')
        lines += scaling + [f'![CPU scaling]({osp.basename(stem)}_scaling_cpu.png)', '']
    if 'gpu' in args.sections:
        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name()
            lines += [f'# GPU: {gpu}', '']
            for dtype in (None, torch.bfloat16):
                lines += section_speed(args, 'cuda', dtype)
                scaling, points = section_scaling(args, 'cuda', dtype)
                tag = 'bf16' if dtype else 'fp32'
                plot_scaling(points, f'{stem}_scaling_gpu_{tag}.png', f'{gpu}, {tag}, batch 1')
                lines += scaling + [f'![GPU scaling]({osp.basename(stem)}_scaling_gpu_{tag}.png)',
                                    '']
            lines += section_gpu_training(args)
        else:
            lines += ['# GPU', '', 'Not measured: no GPU was available to the run that wrote this '
                      'page. On a GPU machine, the same command adds fp32 and bf16 tables and '
                      'RetinaNet training throughput here.', '']
    if 'quickstart' in args.sections:
        lines += section_quickstart(args)
    if 'plugins' in args.sections:
        lines += section_plugins(args)
    with open(args.out, 'w') as f:
        f.write('\n'.join(lines))
    log(f'wrote {args.out}')


if __name__ == '__main__':
    main()
