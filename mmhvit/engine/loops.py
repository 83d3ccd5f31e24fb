"""An epoch-based training loop that resumes mid-epoch exactly where a killed run stopped.

MMEngine's ``EpochBasedTrainLoop`` resumed from an iteration checkpoint restarts the current
epoch from its first batch (its batches before the checkpoint are trained twice) and does not
restore the random number generators. This loop skips the batches the checkpoint has already
seen and restores the Python, numpy and torch generator states saved with it, so that a resumed
run continues with the batches and random draws of an uninterrupted one.
"""
import random
from typing import Optional

import numpy as np
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.registry import HOOKS, LOOPS
from mmengine.runner import EpochBasedTrainLoop

RNG_KEY = 'rng_state'


def get_rng_state() -> dict:
    """The global generators' states, as plain values and tensors (weights-only loadable)."""
    state = dict(python=random.getstate(), numpy=np.random.get_state(),
                 torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`get_rng_state` returned."""
    version, internal, gauss = state['python']
    random.setstate((version, tuple(internal), gauss))
    np.random.set_state(state['numpy'])
    torch.set_rng_state(state['torch'])
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state['cuda'])


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Save the generator states with every checkpoint and hand them to the resuming loop.

    Checkpoints are written by rank 0, so they hold rank 0's states; every rank restores them.
    """

    priority = 'VERY_LOW'

    def __init__(self, loop: Optional['ResumableEpochBasedTrainLoop'] = None):
        self.loop = loop

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint[RNG_KEY] = get_rng_state()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        loop = self.loop or getattr(runner, '_train_loop', None)
        if isinstance(loop, ResumableEpochBasedTrainLoop):
            loop.pending_rng_state = checkpoint.get(RNG_KEY)


@LOOPS.register_module()
class ResumableEpochBasedTrainLoop(EpochBasedTrainLoop):
    """``EpochBasedTrainLoop`` that resumes from an iteration checkpoint without losing or
    repeating a batch.

    On resume, the epoch in progress re-creates its data order (the sampler is seeded by
    epoch), draws and discards the batches the checkpoint had trained (data loading with its
    augmentation random draws, but no training), restores the generator states saved with the
    checkpoint by :class:`RNGStateHook`, and trains from the next batch. The hook is registered
    by the loop itself. Use it as ``train_cfg = dict(type='ResumableEpochBasedTrainLoop', ...)``.
    """

    def __init__(self, runner, dataloader, max_epochs: int, **kwargs):
        super().__init__(runner, dataloader, max_epochs, **kwargs)
        self.pending_rng_state: Optional[dict] = None
        if not any(isinstance(hook, RNGStateHook) for hook in runner.hooks):
            runner.register_hook(RNGStateHook(self))

    def run_epoch(self) -> None:
        self.runner.call_hook('before_train_epoch')
        self.runner.model.train()
        batches = iter(self.dataloader)
        done = self._iter - self._epoch * len(self.dataloader)
        if done > 0:
            for _ in range(done):
                next(batches)
            print_log(f'resumed mid-epoch: skipped the {done} batches of epoch {self._epoch + 1} '
                      'that the checkpoint had already trained', logger='current')
        if self.pending_rng_state is not None:
            # After the skipped batches, so that their augmentation draws do not count twice.
            set_rng_state(self.pending_rng_state)
            self.pending_rng_state = None
        for idx, data_batch in enumerate(batches, start=max(done, 0)):
            self.run_iter(idx, data_batch)
        self.runner.call_hook('after_train_epoch')
        self._epoch += 1
