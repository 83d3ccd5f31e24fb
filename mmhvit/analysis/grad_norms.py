"""Training diagnostics on a config's model: the gradient norm per backbone stage, neck and head on
training batches (a stage whose norm is zero or orders of magnitude below its neighbours does not
learn), and the loss of repeated steps on one batch (a model that cannot fit one batch cannot
learn the data)."""
import collections
import tempfile

from mmengine.config import Config
from mmengine.runner import Runner, load_checkpoint

from ..utils.launch import init_model_weights


def group_of(name: str) -> str:
    """'backbone.stages.2.blocks.0.attn.qkv.weight' -> 'backbone.stages.2'; ResNet's
    'backbone.layer3.0.conv1.weight' -> 'backbone.layer3'; 'neck.lateral_convs.0...' -> 'neck'."""
    parts = name.split('.')
    if parts[0] != 'backbone':
        return parts[0]
    if parts[1] == 'stages':
        return '.'.join(parts[:3])
    return '.'.join(parts[:2]) if parts[1].startswith(('layer', 'patch_embed')) else 'backbone.stem'


def diagnostic_runner(config: str, checkpoint=None, options=None) -> Runner:
    """The config's runner with its model as training starts (or with ``checkpoint`` loaded)."""
    cfg = Config.fromfile(config)
    cfg.merge_from_dict(options or {})
    cfg.work_dir = tempfile.mkdtemp(prefix='mmhvit_diagnostics_')
    cfg.train_dataloader.update(num_workers=0, persistent_workers=False)
    runner = Runner.from_cfg(cfg)
    if checkpoint:
        load_checkpoint(runner.model, checkpoint, map_location='cpu')
    else:
        init_model_weights(runner)
    return runner


def overfit_one_batch(config: str, steps: int, lr: float, options=None, checkpoint=None):
    """Yields ``(step, {loss name: value})`` for ``steps`` optimiser steps on the first training
    batch, with the config's optimiser wrapper (clipping included) at a constant ``lr``."""
    runner = diagnostic_runner(config, checkpoint, options)
    optim_wrapper = runner.build_optim_wrapper(runner.cfg.optim_wrapper)
    for group in optim_wrapper.optimizer.param_groups:
        group['lr'] = lr
    batch = next(iter(runner.train_dataloader))
    runner.model.train()
    for step in range(steps):
        logs = runner.model.train_step(batch, optim_wrapper)
        yield step, {name: float(value.detach()) for name, value in logs.items()}


def grad_norms(config: str, checkpoint=None, batches: int = 4, options=None) -> dict:
    """{group: mean gradient L2 norm over ``batches`` training batches}."""
    runner = diagnostic_runner(config, checkpoint, options)
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
