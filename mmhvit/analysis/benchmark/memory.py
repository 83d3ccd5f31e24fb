"""What a detector's training step keeps for backward, technique by technique
(``--sections memory``): each of our backbones plain (``lean_backward=False``), memory-lean as
its COCO config runs it (the default; for PyramidTNT also with the long attention's weights kept,
``recompute_attention=False``), gradient checkpointing alone and with the lean path, against
MMDetection's Swin-T with and without checkpointing; CPU, fp32, random weights."""
import statistics
from typing import Dict, Iterator, List, Optional, Tuple

import torch

from mmhvit.utils.measure import (
    FreshProcessDied,
    PeakMemory,
    alternating_samples,
    in_fresh_process,
    release_freed_memory_at_once,
    spread,
)

from .detection import (
    BASELINE,
    DET_ALGOS,
    OURS,
    build_detector,
    counting_backbone_saves,
    detector_config,
    detector_steps,
    model_figures,
    selected_backbones,
    synthetic_batch,
)
from .models import log

# (name, backbone overrides, timed): what each row changes in the COCO config's backbone.
OUR_VARIANTS = (('plain', dict(lean_backward=False), True),
                ('with_cp alone', dict(lean_backward=False, with_cp=True), False),
                ('lean, long attention kept', dict(recompute_attention=False), True),
                ('lean', {}, True), ('lean + with_cp', dict(with_cp=True), False))
BASELINE_VARIANTS = (('plain', {}, True), ('with_cp', dict(with_cp=True), False))
# The rows the targets read (``--memory-rows targets``): Swin-T's plain row and these of ours.
TARGET_VARIANTS = ('plain', 'lean', 'lean + with_cp')
MEMORY_ROWS = ('all', 'targets')


def variants(algo: str, name: str, rows: str = 'all') -> Tuple[Tuple[str, dict, bool], ...]:
    """The rows of a backbone ("long attention kept" only for PyramidTNT, the family with long
    matmul attention, whose weights ``recompute_attention`` recomputes as its config runs);
    ``rows='targets'``: only those the targets read."""
    if rows != 'all':
        return tuple(v for v in (OUR_VARIANTS if name in OURS else BASELINE_VARIANTS)
                     if v[0] in TARGET_VARIANTS)
    if name not in OURS:
        return BASELINE_VARIANTS
    backbone = detector_config(algo, name).model.backbone
    long_attention = backbone.type == 'mmhvit.PyramidTNT' and backbone.get(
        'recompute_attention', True)
    return tuple(v for v in OUR_VARIANTS
                 if long_attention or v[0] != 'lean, long attention kept')


def saved_and_peak(algo: str, name: str, overrides: dict, batch: int, size: str) -> dict:
    """In a fresh process: the resident-set peak of two training steps above the level with the
    model built, and the bytes of the distinct tensor storages the backbone's forward keeps for
    backward in the second step (its saved-tensor hooks count them as autograd packs them)."""
    release_freed_memory_at_once()
    torch.manual_seed(0)
    height, width = (int(v) for v in size.split('x'))
    model = build_detector(algo, name, backbone_overrides=overrides)
    train_step, _ = detector_steps(model, synthetic_batch(batch, height, width,
                                                          algo == 'mask-rcnn'))
    with PeakMemory('cpu') as mem:
        train_step()
        with counting_backbone_saves(model) as saved:
            train_step()
    return dict(peak=mem.peak, saved=saved.bytes)


def measure_rows(algo: str, batch: int, args) -> Dict[Tuple[str, str], dict]:
    """Saved bytes and peak (fresh processes, before any detector is built here), then the
    step times of the timed variants, all round-robin."""
    rows = {}
    for name in selected_backbones(args):
        for variant, overrides, _ in variants(algo, name, args.memory_rows):
            log(f'memory: {algo} {name} {variant}, batch {batch} (fresh process)')
            try:
                rows[name, variant] = in_fresh_process(saved_and_peak, algo, name, overrides,
                                                       batch, args.det_size,
                                                       threads=args.threads)
            except FreshProcessDied as error:
                log(f'memory: {algo} {name} {variant}: {error}')
                rows[name, variant] = dict(peak=None, saved=None)
    timed = [(name, variant, overrides) for name in selected_backbones(args)
             for variant, overrides, timed in variants(algo, name, args.memory_rows) if timed]
    log(f'memory: {algo}, batch {batch}, {len(timed)} training steps alternating '
        '(fresh process)')
    # In a process of its own too: the models it builds would otherwise leave this one holding
    # their memory (freed, not returned to the system) beside the next fresh process's.
    samples, gflops = in_fresh_process(timed_steps, algo, batch, args.det_size, timed,
                                       args.repeats, args.warmup, threads=args.threads)
    for (name, variant, _), times in zip(timed, samples):
        rows[name, variant].update(train=times, gflops=gflops[name])
    return rows


def timed_steps(algo: str, batch: int, size: str, timed: List[Tuple[str, str, dict]],
                repeats: int, warmup: int) -> Tuple[List[List[float]], Dict[str, float]]:
    """The step times of the ``timed`` (name, variant, overrides) detectors, alternating, and
    each backbone's GFLOPs."""
    torch.manual_seed(0)
    height, width = (int(v) for v in size.split('x'))
    steps, gflops = [], {}
    for name, _, overrides in timed:
        model = build_detector(algo, name, backbone_overrides=overrides)
        if name not in gflops:  # counted once: a backbone's variants run the same products
            gflops[name] = model_figures(model, height, width)['gflops']
        steps.append(detector_steps(model, synthetic_batch(batch, height, width,
                                                           algo == 'mask-rcnn'))[0])
    return alternating_samples(steps, repeats, warmup), gflops


def mib(value: Optional[int]) -> str:
    return 'died' if value is None else f'{value / 2**20:.0f}'


def ratio(a: Optional[float], b: Optional[float]) -> str:
    return '—' if a is None or not b else f'{a / b:.2f}'


def table_lines(rows: Dict[Tuple[str, str], dict]) -> List[str]:
    base = rows.get((BASELINE, 'plain'), {})
    base_time = statistics.median(base['train']) if base.get('train') else None
    lines = [
        '| backbone | variant | saved for backward (MiB) | saved / Swin-T | training peak (MiB) '
        '| peak / Swin-T | training step (s) min / median / max | step / Swin-T | '
        'step / plain | backbone GFLOPs | step per GFLOP / Swin-T |', '|---' * 11 + '|'
    ]
    for (name, variant), r in rows.items():
        plain = rows.get((name, 'plain'), {})
        time = statistics.median(r['train']) if r.get('train') else None
        plain_time = statistics.median(plain['train']) if plain.get('train') else None
        lines.append(
            f'| {name} | {variant} | {mib(r["saved"])} | {ratio(r["saved"], base.get("saved"))} '
            f'| {mib(r["peak"])} | {ratio(r["peak"], base.get("peak"))} | '
            f'{spread(r["train"], 3) if r.get("train") else "—"} | {ratio(time, base_time)} | '
            f'{ratio(time, plain_time)} | {gflops(r)} | {ratio(per_gflop(r), per_gflop(base))} |')
    return lines


def gflops(row: dict) -> str:
    return f'{row["gflops"]:.1f}' if row.get('gflops') else '—'


def per_gflop(row: dict) -> Optional[float]:
    """Median step seconds per backbone GFLOP of a timed row."""
    if not row.get('train') or not row.get('gflops'):
        return None
    return statistics.median(row['train']) / row['gflops']


def target_lines(rows: Dict[Tuple[str, str], dict]) -> List[str]:
    """The issue's targets, checked on the figures: against Swin-T's plain row, each family's
    default (lean) saved bytes and peak <= 1.0x, the lightest <= 0.8x, with_cp peaks <= 0.6x;
    the lean step no slower than the plain one by more than 5%."""
    base = rows.get((BASELINE, 'plain'))
    ours = sorted({name for name, _ in rows if name in OURS})
    if not base or not ours or base['saved'] is None or base['peak'] is None:
        return [f'No {BASELINE} row: targets not checked.']

    lines = []
    for key, label, limit, variant in (('saved', 'saved for backward', 1., 'lean'),
                                       ('peak', 'training peak', 1., 'lean'),
                                       ('peak', 'training peak with with_cp', .6,
                                        'lean + with_cp')):
        figures = {n: rows[n, variant][key] / base[key] for n in ours
                   if rows[n, variant][key] is not None}
        missed = [f'{n} {x:.2f}x' for n, x in figures.items() if x > limit]
        lines.append(f'- {label} (variant {variant}) <= {limit:.1f}x {BASELINE}: '
                     + ('met by every family' if not missed else f'missed: {", ".join(missed)}'))
        if limit == 1.:
            lightest = min(figures, key=figures.get)
            lines.append(f'- the lightest ({lightest}, {label}) <= 0.8x: '
                         f'{"met" if figures[lightest] <= .8 else "missed"} '
                         f'({figures[lightest]:.2f}x)')
    slow, timed = [], False
    for name in ours:
        plain, lean = rows[name, 'plain'].get('train'), rows[name, 'lean'].get('train')
        timed = timed or bool(plain and lean)
        if plain and lean and statistics.median(lean) > 1.05 * statistics.median(plain):
            slow.append(f'{name} {statistics.median(lean) / statistics.median(plain):.2f}x')
    if timed:  # (a run with --repeats 0 times nothing: no verdict)
        lines.append('- lean step <= 1.05x plain: ' + ('met by every family' if not slow else
                                                         f'missed: {", ".join(slow)}'))
    return lines + time_target_lines(rows, base, ours)


def time_target_lines(rows: Dict[Tuple[str, str], dict], base: dict, ours: List[str]
                      ) -> List[str]:
    """Each family's lean step per backbone GFLOP <= Swin-T's; NesT-T's lean step <= Swin-T's."""
    base_rate = per_gflop(base)
    if base_rate is None:
        return []
    rates = {n: per_gflop(rows[n, 'lean']) for n in ours}
    slow = [f'{n} {rate / base_rate:.2f}x' for n, rate in rates.items()
            if rate and rate > base_rate]
    lines = [f'- lean step per backbone GFLOP <= 1.0x {BASELINE}: '
             + ('met by every family' if not slow else f'missed: {", ".join(slow)}')]
    nest = rows.get(('NesT-T', 'lean'), {}).get('train')
    if nest:
        step = statistics.median(nest) / statistics.median(base['train'])
        lines.append(f'- NesT-T lean step <= 1.0x {BASELINE}: '
                     f'{"met" if step <= 1. else "missed"} ({step:.2f}x)')
    return lines


def section_memory(args) -> Iterator[List[str]]:
    """The section's lines: its heading, then a table per detector and batch, each as it
    completes (a run that dies late keeps what it measured)."""
    height, width = (int(v) for v in args.det_size.split('x'))
    lines = [
        f'## Memory kept for backward, technique by technique (CPU, fp32, {height}x{width})', '',
        'The COCO configs of the detection section with random weights, one row per backbone '
        'and variant: "plain" is `lean_backward=False`; "lean" the config as shipped '
        '(`lean_backward=True`, the default: what feeds a conv or linear layer (norms, '
        'activations, depthwise convs, the expanding 1x1 conv of an inverted residual, an '
        'MLP\'s fc1, H-MHSA\'s qkv projection with its window attention) and the attention '
        'weights of windows and words recomputed in backward: `mmhvit/models/layers/lean.py`, '
        '`recomputed_attention.py`; a conv followed by a frozen BatchNorm (`norm_eval`, '
        'TransCNN\'s configs) runs there as one conv with the norm folded into it; the '
        'recomputed SiLU and GELU run out of place, their backward writing into the gradient '
        'they are given; on the CPU the depthwise convs over 3x3 (TransCNN\'s 5x5) take their '
        'backward as forward convs: `depthwise.py`; with '
        '`recompute_attention=True`, the default, also '
        'PyramidTNT\'s long biased attention, its bias rows made a query chunk at a time); '
        '"long attention kept" is `recompute_attention=False`; "with_cp alone" is '
        'gradient checkpointing of every block without the lean path (`lean_backward=False, '
        'with_cp=True`); "lean + with_cp" both, and, in TransCNN and HAT-Net, the inverted '
        'residuals\' backward a band of rows at a time (`banded.py`). Saved for backward: the '
        'distinct '
        'tensor storages the backbone\'s forward keeps for backward in a training step. Training '
        'peak: the resident-set peak (VmHWM) of two training steps in a fresh process above its '
        'level with the detector built, glibc\'s malloc set to unmap every freed block of 64 KiB '
        'or more at once (`release_freed_memory_at_once`: the resident set follows the memory '
        'in use). Step: forward, loss, backward, AdamW step; '
        f'{args.repeats} repeats after {args.warmup} warm-up, every timed row\'s step in turn '
        'within each repeat (the with_cp rows are not timed). Ratios: to Swin-T\'s plain row and '
        'to the same backbone\'s plain row. Backbone GFLOPs: multiply-adds of one image, '
        'attention products included (as the detection section counts them); step per GFLOP: '
        'the median step over them, to Swin-T\'s.'
        + (' Only the rows the targets read (`--memory-rows targets`).'
           if args.memory_rows == 'targets' else ''), ''
    ]
    yield lines
    for algo in args.det_algos:
        for batch in args.det_batches:
            rows = measure_rows(algo, batch, args)
            yield [f'### {DET_ALGOS[algo]}, batch {batch}', '', *table_lines(rows), '',
                   *target_lines(rows), '']
