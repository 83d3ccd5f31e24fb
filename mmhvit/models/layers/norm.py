import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer


def is_local_batch_norm(module: nn.Module) -> bool:
    """A BatchNorm with this process's batch statistics: BatchNorm1d/2d/3d and what runs their
    forward, MMEngine's SyncBN reverted for one process (``revert_sync_batchnorm``, as its Runner
    does without a process group); not SyncBatchNorm."""
    return type(module).forward is nn.BatchNorm2d.forward


def uses_batch_statistics(norm: nn.Module) -> bool:
    """Whether a BatchNorm normalises with the batch's statistics now (training, or no running
    statistics kept), rather than with its running ones (eval mode, as ``norm_eval`` keeps it)."""
    return norm.training or not norm.track_running_stats


def is_batch_norm(module: nn.Module) -> bool:
    """A norm with running statistics (what ``norm_eval`` keeps in eval mode): a BatchNorm of
    :func:`is_local_batch_norm`, or SyncBN."""
    return is_local_batch_norm(module) or isinstance(module, nn.SyncBatchNorm)


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW map."""

    def forward(self, x):
        return F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias,
                            self.eps).permute(0, 3, 1, 2)


def build_norm2d(norm_cfg: dict, channels: int) -> nn.Module:
    """A norm for NCHW maps: ``LN``/``LN2d`` normalise channels per pixel, others come from mmcv."""
    cfg = dict(norm_cfg)
    if cfg.pop('type') in ('LN', 'LN2d'):
        cfg.pop('requires_grad', None)
        return LayerNorm2d(channels, **cfg)
    return build_norm_layer(norm_cfg, channels)[1]
