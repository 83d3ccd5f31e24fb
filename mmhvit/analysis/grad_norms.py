"""Gradient norm per backbone stage, neck and head of a config's model on training batches: a
stage whose norm is zero or orders of magnitude below its neighbours does not learn."""
import collections
import tempfile

from mmengine.config import Config
from mmengine.runner import Runner, load_checkpoint


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
