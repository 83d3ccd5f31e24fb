"""Export a backbone, or a whole detector in tensor mode, to ONNX (opset 17) and check it.

    python tools/deployment/pytorch2onnx.py CONFIG [CHECKPOINT] --shape H W [--dynamic]
        [--out FILE] [--backbone-only] [--attn-chunk N] [--verify] [--cfg-options k=v ...]

A classifier config (``configs/*_in1k.py``) exports its backbone (outputs: the stage maps); any
other config (a detector) exports the whole model in tensor mode (backbone + neck + head raw
outputs, no box decoding and no NMS) unless ``--backbone-only``. ``--dynamic`` makes batch, height
and width dynamic; ``--verify`` then runs ONNX Runtime at the export size and at an odd size
(H + 23, W + 39) and prints the max abs difference from PyTorch. ``--attn-chunk N`` exports
every attention as a loop over chunks of at most N queries (ONNX ``If`` + ``Loop``, decided at
run time: one chunk where the queries are at most N), so that at most N x keys logits per head
exist at once (default: whole attention; see docs/deployment.md). Without a checkpoint the
weights are random. The TorchScript exporter is used (see docs/deployment.md for why).
"""
import argparse
import os
import os.path as osp
import sys

import torch
from mmengine.config import Config, DictAction

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors  # noqa: E402
from mmhvit.utils.export import (  # noqa: E402
    OPSET,
    build_export_model,
    compare_with_onnx,
    export_onnx,
    ort_session,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Export a model to ONNX')
    parser.add_argument('config')
    parser.add_argument('checkpoint', nargs='?', help='weights (default: random)')
    parser.add_argument('--shape', type=int, nargs=2, required=True, metavar=('H', 'W'),
                        help='input size of the traced example')
    parser.add_argument('--dynamic', action='store_true',
                        help='dynamic batch, height and width axes')
    parser.add_argument('--out', help='ONNX file (default: work_dirs/onnx/CONFIG_NAME.onnx)')
    parser.add_argument('--backbone-only', action='store_true',
                        help='export model.backbone of any config')
    parser.add_argument('--opset', type=int, default=OPSET)
    parser.add_argument('--attn-chunk', type=int, metavar='N',
                        help='attend at most N queries at a time (an ONNX Loop over query '
                        'chunks) in attentions of more than N queries; default: whole attention')
    parser.add_argument('--verify', action='store_true',
                        help='compare ONNX Runtime with PyTorch (rtol 1e-3, atol 1e-4)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    add_debug_argument(parser)
    return parser.parse_args(argv)


@reports_user_errors
def main(argv=None):
    args = parse_args(argv)
    if min(args.shape) < 1:
        raise ValueError(f'--shape must be positive, got {args.shape}')
    if args.attn_chunk is not None and args.attn_chunk < 1:
        raise ValueError(f'--attn-chunk must be positive, got {args.attn_chunk}')
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    module, what = build_export_model(cfg, args.checkpoint, args.backbone_only)
    out = args.out or osp.join(
        'work_dirs', 'onnx',
        osp.splitext(osp.basename(args.config))[0] + ('_backbone' if what == 'backbone' else '')
        + '.onnx')
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    info = export_onnx(module, out, args.shape, dynamic=args.dynamic, opset=args.opset,
                       attn_chunk=args.attn_chunk)
    size_mb = osp.getsize(out) / 2**20
    chunks = f', attention in chunks of {args.attn_chunk} queries' if args.attn_chunk else ''
    print(f'Exported {what} of {args.config} at {args.shape[0]}x{args.shape[1]} '
          f'({"dynamic" if args.dynamic else "static"} axes, opset {args.opset}{chunks}) to {out}: '
          f'{len(info["output_names"])} outputs, {size_mb:.1f} MiB, {info["seconds"]:.1f} s')
    if args.verify:
        session = ort_session(out)
        height, width = args.shape
        sizes = [(height, width)] + ([(height + 23, width + 39)] if args.dynamic else [])
        for h, w in sizes:
            diff = compare_with_onnx(module, session, torch.randn(1, 3, h, w))
            print(f'ONNX Runtime vs PyTorch at {h}x{w}: max abs diff {diff:.2e} (within rtol '
                  '1e-3, atol 1e-4)')


if __name__ == '__main__':
    main()
