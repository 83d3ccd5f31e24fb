"""Plot the training loss curves of a run from MMEngine's scalar log.

    python tools/analysis_tools/plot_loss.py WORK_DIR [--out loss.png] [--keys loss loss_cls ...]

Reads the newest ``WORK_DIR/<timestamp>/vis_data/scalars.json`` that holds training losses.
"""
import argparse
import os.path as osp

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from mmhvit.analysis.training_logs import read_losses  # noqa: E402
from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors  # noqa: E402


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description='Plot training loss curves')
    parser.add_argument('work_dir')
    parser.add_argument('--out', help='PNG to write (default WORK_DIR/loss_curve.png)')
    parser.add_argument('--keys', nargs='+', help='loss keys to plot (default: all)')
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    source, curves = read_losses(args.work_dir)
    keys = args.keys or sorted(curves)
    unknown = [k for k in keys if k not in curves]
    if unknown:
        raise KeyError(f'no curve named {unknown} in {source}; it has {sorted(curves)}')
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in keys:
        ax.plot(*curves[key], label=key, linewidth=2 if key == 'loss' else 1)
    ax.set_xlabel('iteration')
    ax.set_ylabel('loss')
    ax.set_title(osp.basename(osp.normpath(args.work_dir)))
    ax.grid(alpha=0.3)
    ax.legend()
    out = args.out or osp.join(args.work_dir, 'loss_curve.png')
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f'{out} (from {source})')


if __name__ == '__main__':
    main()
