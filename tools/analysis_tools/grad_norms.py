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
import collections
import json
import tempfile

import torch
from mmengine.config import Config, DictAction
from mmengine.runner import Runner, load_checkpoint

from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors


def group_of(name: str) -> str:
    """'backbone.stages.2.blocks.0.attn.qkv.weight' -> 'backbone.stages.2'; ResNet's
    'backbone.layer3.0.conv1.weight' -> 'backbone.layer3'; 'neck.lateral_convs.0...' -> 'neck'."""
    parts = name.split('.')
    if parts[0] != 'backbone':
        return parts[0]
    if parts[1] == 'stages':
        return '.'.join(parts[:3])
    return '.'.join(parts[:2]) if parts[1].startswith(('layer', 'patch_embed')) else 'backbone.stem'


def grad_norms(config: str, checkpoint=None, batches: int = 4, options=None) -> dict:
    """{group: mean gradient L2 norm over ``batches`` training batches}."""
    cfg = Config.fromfile(config)
    cfg.merge_from_dict(options or {})
    cfg.work_dir = tempfile.mkdtemp(prefix='grad_norms_')
    cfg.train_dataloader.update(num_workers=0, persistent_workers=False)
    runner = Runner.from_cfg(cfg)
    if checkpoint:
        load_checkpoint(runner.model, checkpoint, map_location='cpu')
    else:
        runner._init_model_weights()
    model = runner.model
    model.train()
    sums = collections.defaultdict(float)
    for index, batch in enumerate(runner.train_dataloader):
        if index == batches:
            break
        model.zero_grad()
        data = model.data_preprocessor(batch, True)
        loss, _ = model.parse_losses(model(**data, mode='loss'))
        loss.backward()
        squares = collections.defaultdict(float)
        for name, param in model.named_parameters():
            if param.grad is not None:
                squares[group_of(name)] += float(param.grad.detach().pow(2).sum())
        for group, square in squares.items():
            sums[group] += square**0.5 / batches
    return dict(sums)


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
