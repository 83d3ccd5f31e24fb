"""Run the quickstart matrix and write its results page.

    python tools/analysis_tools/quickstart_results.py summary WORK_DIR
    python tools/analysis_tools/quickstart_results.py untrained CONFIG [--work-dir DIR]
    python tools/analysis_tools/quickstart_results.py run [CONFIG ...] [--force]
    python tools/analysis_tools/quickstart_results.py report [--out docs/quickstart_results.md]

``summary`` prints a finished quickstart run's metric (tools/quickstart.sh ends with it).
``untrained`` evaluates a config's model as initialised before training (the same seed, so the
same weights the training run starts from; detectors keep every box, score threshold 0).
``run`` trains and evaluates every quickstart config (or the ones given) through
tools/quickstart.sh, then its untrained model; finished runs are kept unless ``--force``.
``report`` reads the work dirs and writes the results table, the targets and one loss-curve plot
per task.
"""
import argparse
import glob
import json
import os
import os.path as osp
import subprocess
import sys

from mmhvit.analysis.quickstart import (
    TASKS,
    parse_name,
    read_metrics,
    summary_table,
    targets,
)
from mmhvit.analysis.training_logs import read_losses, seconds_per_iter
from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
QUICKSTART = osp.join(ROOT, 'configs', 'quickstart')


def quickstart_configs():
    return sorted(p for p in glob.glob(osp.join(QUICKSTART, '*.py'))
                  if not osp.basename(p).startswith('_'))


def work_dir_of(config: str) -> str:
    return osp.join(ROOT, 'work_dirs', osp.basename(config)[:-len('.py')])


def summary(work_dir: str) -> None:
    algo = osp.basename(osp.normpath(work_dir)).split('_')[0]
    metrics = read_metrics(osp.join(work_dir, 'metrics.json'), algo)
    vis = sorted(glob.glob(osp.join(work_dir, '*', 'vis', '**', '*.png'), recursive=True) +
                 glob.glob(osp.join(work_dir, 'vis', '**', '*.png'), recursive=True))
    wall = osp.join(work_dir, 'wall_seconds')
    if osp.exists(wall):
        print('\n==== quickstart done in %.1f min ====' % (int(open(wall).read()) / 60))
    for label, value in metrics.items():
        print(f'{label}: {value:.3f}')
    print(f'checkpoint and logs: {work_dir}')
    print(f'loss curve:          {osp.join(work_dir, "loss_curve.png")}')
    print(f'predictions drawn:   {len(vis)} images in '
          f'{osp.dirname(vis[0]) if vis else "(none)"}')


def untrained(config: str, work_dir: str) -> str:
    """Save the model as the training run initialises it, evaluate it; returns the metrics file."""
    os.makedirs(work_dir, exist_ok=True)
    checkpoint = osp.join(work_dir, 'untrained.pth')
    subprocess.run([sys.executable, '-c', _SAVE_UNTRAINED, config, checkpoint, work_dir],
                   check=True, cwd=ROOT)
    algo = parse_name(config)[0]
    keep_all = {'retinanet': ['model.test_cfg.score_thr=0.0'],
                'mask-rcnn': ['model.test_cfg.rcnn.score_thr=0.0']}.get(algo, [])
    metrics = osp.join(work_dir, 'metrics.json')
    command = [sys.executable, 'tools/test.py', config, checkpoint, '--work-dir', work_dir,
               '--metrics-out', metrics]
    subprocess.run(command + (['--cfg-options', *keep_all] if keep_all else []), check=True,
                   cwd=ROOT)
    return metrics


_SAVE_UNTRAINED = '''
import sys, torch
from mmengine.config import Config
from mmengine.runner import Runner
from mmhvit.utils import init_model_weights
config, out, work_dir = sys.argv[1:]
cfg = Config.fromfile(config)
cfg.work_dir = work_dir
runner = Runner.from_cfg(cfg)  # seeds as the training run does, then builds the model
init_model_weights(runner)
torch.save(dict(state_dict=runner.model.state_dict(), meta=dict(untrained=True)), out)
'''


def run(configs, force: bool) -> None:
    for config in configs:
        work_dir = work_dir_of(config)
        if force or not osp.exists(osp.join(work_dir, 'metrics.json')):
            env = dict(os.environ, CONFIG=osp.relpath(config, ROOT), WORK_DIR=work_dir)
            env.pop('TASK', None)
            env.pop('BACKBONE', None)
            subprocess.run(['bash', 'tools/quickstart.sh'], check=True, cwd=ROOT, env=env)
        if force or not osp.exists(osp.join(work_dir, 'untrained', 'metrics.json')):
            untrained(config, osp.join(work_dir, 'untrained'))


def collect():
    """One row per finished quickstart run."""
    rows = []
    for config in quickstart_configs():
        algo, backbone, epochs = parse_name(config)
        work_dir = work_dir_of(config)
        if not osp.exists(osp.join(work_dir, 'metrics.json')):
            continue
        start_file = osp.join(work_dir, 'untrained', 'metrics.json')
        wall = osp.join(work_dir, 'wall_seconds')
        rows.append(dict(
            config=osp.basename(config), algo=algo, task=TASKS[algo][0], backbone=backbone,
            epochs=epochs, metrics=read_metrics(osp.join(work_dir, 'metrics.json'), algo),
            untrained=read_metrics(start_file, algo) if osp.exists(start_file) else None,
            s_per_iter=seconds_per_iter(work_dir),
            wall_min=int(open(wall).read()) / 60 if osp.exists(wall) else float('nan'),
            work_dir=work_dir))
    return rows


def plot_losses(rows, out_dir: str):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    os.makedirs(out_dir, exist_ok=True)
    written = {}
    for algo in TASKS:
        task_rows = [r for r in rows if r['algo'] == algo]
        if not task_rows:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for row in task_rows:
            steps, values = read_losses(row['work_dir'])[1]['loss']
            ax.plot(steps, values, label=row['backbone'], linewidth=1.5)
        ax.set_xlabel('iteration')
        ax.set_ylabel('total training loss')
        ax.set_yscale('log')
        ax.set_title(f'{algo} on the shapes data')
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = osp.join(out_dir, f'loss_{algo}.png')
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written[algo] = path
    return written


def report(out: str, curves_dir: str) -> None:
    rows = collect()
    if not rows:
        raise FileNotFoundError('no finished quickstart run under work_dirs/: run `run` first')
    curves = plot_losses(rows, curves_dir)
    table = ['| task | config | metrics | untrained | epochs | s/iter | wall (min) |',
             '|---|---|---|---|---|---|---|']
    for row in rows:
        metrics = ', '.join(f'{k} {v:.3f}' for k, v in row['metrics'].items())
        start = (', '.join(f'{k} {v:.3f}' for k, v in row['untrained'].items())
                 if row['untrained'] else '—')
        table.append(f'| {row["task"]} | `{row["config"]}` | {metrics} | {start} | '
                     f'{row["epochs"]} | {row["s_per_iter"]:.2f} | {row["wall_min"]:.1f} |')
    page = [GENERATED_MARK, '', *summary_table(rows), '', *table, '', '### Targets', '',
            *targets(rows), '',
            '### Loss curves', '']
    page += [f'![{algo}]({osp.relpath(path, osp.dirname(out))})' for algo, path in curves.items()]
    page.append(GENERATED_END)
    _replace_generated(out, '\n'.join(page) + '\n')
    print(f'wrote {out} ({len(rows)} runs) and {len(curves)} loss plots in {curves_dir}')


GENERATED_MARK = '<!-- generated by quickstart_results.py report: begin -->'
GENERATED_END = '<!-- generated by quickstart_results.py report: end -->'


def _replace_generated(path: str, block: str) -> None:
    """Write ``block`` between the page's generated markers (the prose around them stays)."""
    text = open(path).read() if osp.exists(path) else f'{GENERATED_MARK}\n{GENERATED_END}\n'
    if GENERATED_MARK not in text or GENERATED_END not in text:
        raise ValueError(f'{path} has no generated-block markers ({GENERATED_MARK})')
    head, rest = text.split(GENERATED_MARK, 1)
    tail = rest.split(GENERATED_END, 1)[1]
    with open(path, 'w') as f:
        f.write(head + block.rstrip('\n') + tail)


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    add_debug_argument(parser)
    sub = parser.add_subparsers(dest='command', required=True)
    sub.add_parser('summary').add_argument('work_dir')
    p = sub.add_parser('untrained')
    p.add_argument('config')
    p.add_argument('--work-dir')
    p = sub.add_parser('run')
    p.add_argument('configs', nargs='*')
    p.add_argument('--force', action='store_true', help='rerun finished runs')
    p = sub.add_parser('report')
    p.add_argument('--out', default=osp.join(ROOT, 'docs', 'quickstart_results.md'))
    p.add_argument('--curves-dir', default=osp.join(ROOT, 'docs', 'quickstart'))
    args = parser.parse_args(argv)
    if args.command == 'summary':
        summary(args.work_dir)
    elif args.command == 'untrained':
        work_dir = args.work_dir or osp.join(work_dir_of(args.config), 'untrained')
        print(json.dumps(read_metrics(untrained(args.config, work_dir),
                                      parse_name(args.config)[0])))
    elif args.command == 'run':
        run([osp.abspath(c) for c in args.configs] or quickstart_configs(), args.force)
    else:
        report(args.out, args.curves_dir)


if __name__ == '__main__':
    main()
