"""Deployed backbones: ONNX export, ONNX Runtime and torch.compile against eager PyTorch.

    python tools/deployment/benchmark_onnx.py [--configs configs/transcnn_b_in1k.py ...]
        [--sizes 224x224 800x1344] [--compile-sizes 224x224] [--attn-chunk 0 256 ...]
        [--repeats 5] [--threads 2] [--out FILE]

Each config's backbone (random weights, all four outputs, batch 1) is exported with dynamic axes
at 224 x 224 (TorchScript exporter, opset 17); the export time and file size are recorded, then
ONNX Runtime (CPU) and eager PyTorch are timed at every size, alternating A/B, medians of
``--repeats`` runs after one warm-up each, with the max abs difference of the outputs. Eager and
``torch.compile`` (inductor) are timed the same way at ``--compile-sizes`` (the first compiled
call, which compiles, is reported apart). ``--attn-chunk`` exports once per value, 0 with whole
attention (the default), N > 0 with attention in chunks of at most N queries (an ONNX ``Loop``,
``pytorch2onnx.py --attn-chunk``); each export is timed against eager. Prints a Markdown table
(and writes it to ``--out``).
"""
import argparse
import functools
import os.path as osp
import sys
import tempfile
import time
from typing import List

import numpy as np
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmhvit.utils import alternating_times  # noqa: E402
from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors  # noqa: E402
from mmhvit.utils.export import export_onnx, flatten_outputs, ort_session  # noqa: E402

CONFIGS = ('configs/transcnn_b_in1k.py', 'configs/nest_t_in1k.py', 'configs/tnt_s_in1k.py')


def build_backbone(config: str) -> torch.nn.Module:
    cfg = Config.fromfile(osp.join(REPO, config))
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    backbone = dict(cfg.model.backbone, out_indices=(0, 1, 2, 3), drop_path_rate=0.)
    backbone.pop('init_cfg', None)
    torch.manual_seed(0)
    model = MODELS.build(backbone)
    model.init_weights()
    return model.eval()


def parse_size(text: str):
    height, width = text.lower().split('x')
    return int(height), int(width)


def no_grad_call(model, x: torch.Tensor):
    with torch.no_grad():
        return model(x)


def timed_row(cells: str, eager, other, diff: float, repeats: int) -> str:
    """A table row: ``cells``, then eager and ``other`` timed A/B-alternating (ms), their
    ratio and the outputs' max abs difference ``diff``; printed as it is made."""
    t_eager, t_other = alternating_times([eager, other], repeats, 1, 'cpu')
    row = (f'| {cells} | {t_eager * 1e3:.0f} | {t_other * 1e3:.0f} | {t_other / t_eager:.2f} | '
           f'{diff:.1e} |')
    print(row, flush=True)
    return row


def onnx_rows(model, name: str, args, tmp: str, chunk: int = 0) -> List[str]:
    """Eager vs ONNX Runtime (one dynamic export, attention in chunks of ``chunk`` queries
    unless 0) at each of ``args.sizes``."""
    path = osp.join(tmp, f'{name}_chunk{chunk}.onnx')
    info = export_onnx(model, path, (224, 224), dynamic=True, attn_chunk=chunk or None)
    size_mb = osp.getsize(path) / 2**20
    session = ort_session(path, threads=args.threads)
    runtime = f'ONNX Runtime, attention chunk {chunk}' if chunk else 'ONNX Runtime'
    print(f'{name} ({runtime}): exported in {info["seconds"]:.1f} s, {size_mb:.1f} MiB',
          flush=True)
    rows = []
    for text in args.sizes:
        x = torch.randn(1, 3, *parse_size(text))
        eager = functools.partial(no_grad_call, model, x)
        onnx = functools.partial(session.run, None, {'input': x.numpy()})
        diff = max(float(np.abs(a.numpy() - b).max())
                   for a, b in zip(flatten_outputs(eager()), onnx()))
        rows.append(timed_row(f'{name} | {runtime} | {text} | {info["seconds"]:.1f} | '
                              f'{size_mb:.1f}', eager, onnx, diff, args.repeats))
    return rows


def compile_rows(model, name: str, args) -> List[str]:
    """Eager vs ``torch.compile`` at each of ``args.compile_sizes`` (first call timed apart)."""
    rows = []
    for text in args.compile_sizes:
        x = torch.randn(1, 3, *parse_size(text))
        torch.compiler.reset()
        compiled = torch.compile(model)
        start = time.perf_counter()
        with torch.no_grad():
            out = compiled(x)
        first = time.perf_counter() - start
        eager = functools.partial(no_grad_call, model, x)
        run_compiled = functools.partial(no_grad_call, compiled, x)
        diff = max(float((a - b).abs().max())
                   for a, b in zip(flatten_outputs(eager()), flatten_outputs(out)))
        rows.append(timed_row(f'{name} | torch.compile | {text} | {first:.0f} (first call) | -',
                              eager, run_compiled, diff, args.repeats))
    return rows


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description='ONNX Runtime / torch.compile vs eager')
    parser.add_argument('--configs', nargs='+', default=list(CONFIGS))
    parser.add_argument('--sizes', nargs='*', default=['224x224', '800x1344'],
                        help='ONNX Runtime sizes (none: no export, torch.compile only)')
    parser.add_argument('--compile-sizes', nargs='*', default=['224x224'])
    parser.add_argument('--attn-chunk', type=int, nargs='+', default=[0], metavar='N',
                        help='one export per value: 0 whole attention, N attention in chunks of '
                        'at most N queries (an ONNX Loop)')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--out')
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    if min(args.attn_chunk) < 0:
        raise ValueError(f'--attn-chunk takes 0 (whole attention) or positive values, got '
                         f'{args.attn_chunk}')
    torch.set_num_threads(args.threads)

    rows = []
    tmp = tempfile.mkdtemp(prefix='onnx_bench_')
    for config in args.configs:
        model = build_backbone(config)
        name = osp.splitext(osp.basename(config))[0].replace('_in1k', '')
        for chunk in args.attn_chunk if args.sizes else ():
            rows += onnx_rows(model, name, args, tmp, chunk)
        rows += compile_rows(model, name, args)
    table = '\n'.join([
        '| backbone | runtime | input | export / compile s | ONNX MiB | eager ms | runtime ms | '
        'runtime / eager | max abs diff |',
        '| --- | --- | --- | --- | --- | --- | --- | --- | --- |', *rows])
    print(table)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(table + '\n')


if __name__ == '__main__':
    main()
