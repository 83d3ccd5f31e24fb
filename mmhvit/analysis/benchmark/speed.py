"""Forward latency against the references, A/B alternating (``--sections speed``), and where
the CPU time goes per op (``--sections profile``)."""
from typing import Dict, List

import torch
import torch.nn as nn

from mmhvit.utils import ab_ratio_runs, spread

from .models import SCALING_ARCHS, build_backbone, log, reference_pair

# The families timed against a reference (:func:`reference_pair`), as the rows name their model.
SPEED_LABELS = {'TransCNN': 'TransCNN-S', 'HAT-Net': 'HAT-Net-S', 'NesT': 'NesT-T', 'TNT': 'TNT-S'}


def speed_pairs(args):
    """(family, reference, ours, input side, reference name) of each family of ``args.families``
    with a reference, built one at a time; ``--official-transcnn`` / ``--official-hatnet``: the
    released files to time against."""
    official = {'TransCNN': args.official_transcnn, 'HAT-Net': args.official_hatnet}
    for family in [f for f in SPEED_LABELS if f in args.families]:
        yield (family, *reference_pair(family, official.get(family)))


def ratio_runs(ours, reference, args):
    """(median ms of ours, of the reference, [ours / reference of each run])."""
    t_ours, t_ref, ratios = ab_ratio_runs(ours, reference, args.ratio_runs, args.repeats,
                                          args.warmup)
    return t_ours * 1e3, t_ref * 1e3, ratios


def section_speed(args) -> List[str]:
    rows = []
    for family, reference, ours, size, ref_name in speed_pairs(args):
        label = SPEED_LABELS[family]
        for batch in args.batches:
            log(f'speed: {label} vs {ref_name}, batch {batch}')
            x = torch.randn(batch, 3, size, size)
            with torch.no_grad():
                diff = (ours(x) - reference(x)).abs().max().item()
                t_ours, t_ref, ratios = ratio_runs(lambda: ours(x), lambda: reference(x), args)
            rows.append(f'| {label} vs {ref_name}, {size} | {batch} | {t_ours:.1f} | '
                        f'{t_ref:.1f} | {spread(ratios)} | {diff:.1e} |')
        reference = ours = None  # free them before the next family
    if 'TransCNN' in args.families:
        arch = SCALING_ARCHS['TransCNN']
        hmhsa = build_backbone('TransCNN', arch).eval()
        # Grid 1 everywhere: every stage runs plain global attention (as TransCNN's stage 4).
        settings = dict(hmhsa.arch_zoo[arch], grid_sizes=[1, 1, 1, 1])
        plain = build_backbone('TransCNN', settings).eval()
        for batch in args.batches:
            log(f'speed: TransCNN H-MHSA vs global attention, batch {batch}')
            x = torch.randn(batch, 3, 256, 256)
            with torch.no_grad():
                t_ours, t_ref, ratios = ratio_runs(lambda: hmhsa(x), lambda: plain(x), args)
            rows.append(f'| TransCNN-B (H-MHSA) vs global attention, 256 | {batch} | '
                        f'{t_ours:.1f} | {t_ref:.1f} | {spread(ratios)} | — |')
    return [
        '## Speed against the reference (CPU, fp32)', '',
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
    for family, reference, ours, size, ref_name in speed_pairs(args):
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
