"""Evaluate a checkpoint with any mmdet / mmseg / mmpretrain config.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out RESULTS.pkl] [--show-dir DIR]
                                           [--metrics-out JSON]
                                           [--cfg-options k=v ...]
                                           [--launcher none|pytorch|slurm|mpi]
"""
import argparse
import json
import os
import os.path as osp

from mmengine.config import Config, DictAction

from mmhvit.utils import (
    add_debug_argument,
    build_runner,
    close_process_group,
    exit_rank,
    prepare_runner_config,
    reports_user_errors,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test (and evaluate) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the dir to save logs and metrics')
    parser.add_argument('--out', help='dump the raw predictions to this pickle file')
    parser.add_argument('--show-dir', help='save images drawn with the predictions here')
    parser.add_argument('--metrics-out', help='also write the final metrics to this JSON file')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of the config, key=value')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
                        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def enable_drawing(cfg: Config, show_dir: str) -> None:
    """Switch on the task's own visualization hook, as each library's test.py does."""
    hook = cfg.get('default_hooks', {}).get('visualization')
    if hook is None:
        raise ValueError('--show-dir needs default_hooks.visualization in the config')
    hook_type = hook['type'].split('.')[-1]
    # Every library writes under the work dir, as mmdet does (WORK_DIR/TIMESTAMP/SHOW_DIR).
    if hook_type == 'DetVisualizationHook':
        hook.update(draw=True, test_out_dir=show_dir)
    elif hook_type == 'SegVisualizationHook':  # every image, not one in 50
        hook.update(draw=True, interval=1)
        cfg.visualizer['save_dir'] = osp.join(cfg.work_dir, show_dir)
    elif hook_type == 'VisualizationHook':  # mmpretrain: every image, not one in 5000
        hook.update(enable=True, interval=1, out_dir=osp.join(cfg.work_dir, show_dir))
    else:
        raise ValueError(f'--show-dir does not know the visualization hook {hook["type"]}')


def add_dump_metric(cfg: Config, out: str) -> None:
    if not out.endswith(('.pkl', '.pickle')):
        raise ValueError(f'--out must be a .pkl or .pickle file, got {out}')
    # mmdet's dumper also encodes masks as RLE; elsewhere MMEngine's generic one does.
    dump_type = 'DumpDetResults' if cfg.get('default_scope') == 'mmdet' else 'DumpResults'
    dump = dict(type=dump_type, out_file_path=out)
    evaluator = cfg.test_evaluator
    cfg.test_evaluator = (list(evaluator) if isinstance(evaluator, (list, tuple)) else
                          [evaluator]) + [dump]


@reports_user_errors
def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    prepare_runner_config(cfg, args.launcher, args.work_dir, args.config)
    cfg.load_from = args.checkpoint
    if args.show_dir:
        enable_drawing(cfg, args.show_dir)
    if args.out:
        add_dump_metric(cfg, args.out)
    runner = build_runner(cfg)
    metrics = runner.test()
    if args.metrics_out:
        with open(args.metrics_out, 'w') as f:
            json.dump({k: _plain(v) for k, v in metrics.items()}, f, indent=1)
    del runner
    return close_process_group()


def _plain(value):
    """A JSON value for a metric: numbers (numpy scalars included) as float, others as str."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


if __name__ == '__main__':
    if main():
        exit_rank()
