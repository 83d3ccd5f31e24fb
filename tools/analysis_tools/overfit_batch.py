"""Repeated training steps on one batch: can the model fit what it is shown?

    python tools/analysis_tools/overfit_batch.py CONFIG [--steps 60] [--lr 5e-4] [--every 10]
        [--checkpoint CKPT] [--cfg-options KEY=VALUE ...]

The first training batch of the config (its seed, pipeline and batch size) is trained on
``--steps`` times with the config's optimiser and gradient clipping at a constant ``--lr``; every
``--every`` steps (and the last) print each loss term. Two backbones under the same detector and
recipe can be compared this way in minutes: a loss term that stays flat for one and falls for the
other shows which head cannot read that backbone's features, before a whole training is spent.
"""
import argparse

from mmengine.config import DictAction

from mmhvit.analysis.grad_norms import overfit_one_batch
from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config')
    parser.add_argument('--steps', type=int, default=60)
    parser.add_argument('--lr', type=float, default=5e-4)
    parser.add_argument('--every', type=int, default=10, help='print every N steps')
    parser.add_argument('--checkpoint', help='trained weights (default: as training starts)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                        help='override config settings, as tools/train.py does')
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.every < 1:
        raise ValueError(f'--steps and --every must be at least 1, got {args.steps} and '
                         f'{args.every}')
    for step, losses in overfit_one_batch(args.config, args.steps, args.lr, args.cfg_options,
                                          args.checkpoint):
        if step % args.every == 0 or step == args.steps - 1:
            print(f'step {step:4d} ' + ' '.join(f'{k}={v:.4f}' for k, v in losses.items()),
                  flush=True)


if __name__ == '__main__':
    main()
