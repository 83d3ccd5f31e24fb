"""Forward and forward+backward time and peak memory of each backbone against input size
(``--sections scaling``), CPU peaks measured in a fresh process each."""
import gc
from typing import List

import torch

from mmhvit.utils import PeakMemory, in_fresh_process, median_time, step_functions

from .models import FAMILIES, log, scaling_models


def memory_probe(name: str, size: str):
    """(forward, forward+backward) CPU peak memory in bytes of one model at ``size``: run it
    through :func:`cpu_peak_memory`, in a fresh process."""
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
    return mem_fwd.peak, mem_bwd.peak


def cpu_peak_memory(name: str, size: str, threads: int):
    return in_fresh_process(memory_probe, name, size, threads=threads)


def section_scaling(args):
    models = scaling_models(args.families)
    if not args.with_vit:
        models.pop('ViT-S/16 (timm)')
    rows, points = [], {}
    for name, make in models.items():
        model = make()
        for size in args.sizes:
            height, width = (int(v) for v in size.split('x'))
            log(f'scaling: {name} at {height}x{width}')
            x = torch.randn(1, 3, height, width)
            forward, forward_backward = step_functions(model, x,
                                                       torch.autocast('cpu', enabled=False))
            model.eval()
            t_fwd = median_time(forward, args.repeats, 1)
            model.train()
            t_bwd = median_time(forward_backward, max(1, args.repeats // 2), 1)
            model.zero_grad(set_to_none=True)
            peaks = cpu_peak_memory(name, size, args.threads)
            rows.append(f'| {name} | {height}x{width} | {t_fwd * 1e3:.0f} | {t_bwd * 1e3:.0f} | '
                        f'{peaks[0] / 2**20:.0f} | {peaks[1] / 2**20:.0f} |')
            points.setdefault(name, []).append((height * width, peaks[1] / 2**20, t_bwd * 1e3))
        del model
        gc.collect()
    lines = [
        '## Cost against input size (CPU, fp32)',
        '',
        'Batch 1, the backbones in multi-scale mode (all four outputs); ViT-S/16 is timm\'s, with '
        'dynamic image size. Peak memory: the resident-set peak (Linux VmHWM) of a fresh process '
        'above its level with the model built; forward+backward is the peak of one training '
        'step.',
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
