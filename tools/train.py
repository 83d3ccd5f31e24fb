"""Train any mmdet / mmseg / mmpretrain config (the task comes from the config's default_scope).

    python tools/train.py CONFIG [--work-dir DIR] [--amp] [--resume [CKPT]] [--auto-scale-lr]
                                 [--cfg-options k=v ...] [--launcher none|pytorch|slurm|mpi]
"""
import argparse
import logging
import os

from mmengine.config import Config, DictAction
from mmengine.logging import print_log

from mmhvit.utils import (
    add_debug_argument,
    build_runner,
    close_process_group,
    exit_rank,
    prepare_runner_config,
    reports_user_errors,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument('--amp', action='store_true', help='automatic mixed precision training')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from CKPT, or from the latest checkpoint in the work dir '
                        'when no path is given')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate by the real batch size (auto_scale_lr)')
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


@reports_user_errors
def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    prepare_runner_config(cfg, args.launcher, args.work_dir, args.config)

    if args.amp:
        if 'Amp' in cfg.optim_wrapper.get('type', 'OptimWrapper'):
            print_log('AMP is already enabled in the config', logger='current',
                      level=logging.WARNING)
        else:
            # MMEngine's AmpOptimWrapper on a GPU (float16, dynamic loss scale); bfloat16 on a CPU.
            cfg.optim_wrapper.type = 'AnyDeviceAmpOptimWrapper'
            cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')

    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg or 'base_batch_size' not in cfg.auto_scale_lr:
            raise ValueError('--auto-scale-lr needs auto_scale_lr=dict(base_batch_size=...) in '
                             'the config')
        cfg.auto_scale_lr.enable = True

    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume

    # a config with a `strategy` (configs/_fsdp.py) gets MMEngine's FlexibleRunner
    runner = build_runner(cfg)
    runner.train()
    del runner
    return close_process_group()


if __name__ == '__main__':
    if main():
        exit_rank()
