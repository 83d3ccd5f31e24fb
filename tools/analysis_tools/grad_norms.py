"""Gradient norm per backbone stage (and per neck / head) of a config's model on training batches.

    python tools/analysis_tools/grad_norms.py CONFIG [--checkpoint CKPT] [--batches 4] [--out F]
        [--cfg-options KEY=VALUE ...]

Without ``--checkpoint`` the model is the one training starts from (the config's seed and
init_cfg). Each of ``--batches`` training batches is one forward + backward of the task's loss;
the printed figure per group is the mean over batches of the L2 norm of the group's gradients,
before clipping. A stage whose norm is zero or orders of magnitude below its neighbours does not
learn; one far above them is what the optimiser's gradient clipping cuts.
"""
import argparse
import json

import torch
from mmengine.config import DictAction

from mmhvit.analysis.grad_norms import grad_norms
from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config')
    parser.add_argument('--checkpoint', help='trained weights (default: as training starts)')
    parser.add_argument('--batches', type=int, default=4)
    parser.add_argument('--out', help='also write the figures to this JSON file')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                        help='override config settings, as tools/train.py does')
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    norms = grad_norms(args.config, args.checkpoint, args.batches, args.cfg_options)
    for group, norm in norms.items():
        print(f'{group:24s} {norm:10.4f}')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(norms, f, indent=1)


if __name__ == '__main__':
    main()
