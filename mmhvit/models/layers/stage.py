"""What every backbone stage shares: running its blocks, optionally with gradient checkpointing."""
import torch
import torch.nn as nn
import torch.utils.checkpoint as cp


class BackboneStage(nn.Module):
    """Base of the stage modules of every family: ``run_block`` checkpoints a block's activations
    (recomputed in the backward pass) when the backbone's ``with_cp`` is on and a tensor argument
    needs a gradient; :class:`~mmhvit.models.backbones.HViTBackbone` sets ``with_cp`` on every
    stage."""

    def __init__(self):
        super().__init__()
        self.with_cp = False

    def run_block(self, block: nn.Module, *args):
        if self.with_cp and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return cp.checkpoint(block, *args, use_reentrant=False)
        return block(*args)
