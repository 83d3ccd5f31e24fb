"""An epoch-based training loop that resumes mid-epoch exactly where a killed run stopped.

MMEngine's ``EpochBasedTrainLoop`` resumed from an iteration checkpoint restarts the current
epoch from its first batch (its batches before the checkpoint are trained twice) and does not
restore the random number generators. This loop skips the batches the checkpoint has already
seen and restores the Python, numpy and torch generator states saved with it, so that a resumed
run continues with the batches and random draws of an uninterrupted one.

A checkpoint also records the data position (iterations per epoch, images per iteration), so that
a run resumed on another number of ranks (a requeued cluster job) continues the epoch at the same
image of the sampler's order and the epoch-based schedules at the same point of the epoch.
"""
import random
from typing import Optional

import numpy as np
import torch
from mmengine.dist import get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.optim import OptimWrapperDict
from mmengine.registry import HOOKS, LOOPS
from mmengine.runner import EpochBasedTrainLoop

RNG_KEY = 'rng_state'
DATA_KEY = 'data_position'


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
    The loop registers the hook itself, or, when a config lists the hook, hands itself to it;
    with another loop the hook only saves the states.
    """

    priority = 'VERY_LOW'

    def __init__(self, loop: Optional['ResumableEpochBasedTrainLoop'] = None):
        self.loop = loop

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint[RNG_KEY] = get_rng_state()
        if self.loop is not None:
            checkpoint[DATA_KEY] = self.loop.data_position()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if self.loop is not None:
            self.loop.take_resume_state(checkpoint)


@LOOPS.register_module()
class ResumableEpochBasedTrainLoop(EpochBasedTrainLoop):
    """``EpochBasedTrainLoop`` that resumes from an iteration checkpoint without losing or
    repeating a batch.

    On resume, the epoch in progress re-creates its data order (the sampler is seeded by
    epoch), draws and discards the batches the checkpoint had trained (data loading with its
    augmentation random draws, but no training), restores the generator states saved with the
    checkpoint by :class:`RNGStateHook`, and trains from the next batch. The hook is registered
    by the loop itself. Use it as ``train_cfg = dict(type='ResumableEpochBasedTrainLoop', ...)``.

    Resumed with another number of images per iteration (ranks x batch) than the checkpoint's, the
    loop converts its position: the images the checkpoint trained in the epoch in progress are
    skipped in the new batches (MMEngine's ``DefaultSampler`` deals the same seeded epoch order to
    any number of ranks), the iteration counter becomes the new one of that point, and the
    parameter schedules continue as a run with the new ranks from the start would at that point
    (those defined in iterations count this run's iterations). The new batch has to divide the
    images done in the epoch, or the remainder is trained again.
    """

    def __init__(self, runner, dataloader, max_epochs: int, **kwargs):
        super().__init__(runner, dataloader, max_epochs, **kwargs)
        self.pending_rng_state: Optional[dict] = None
        self.converted_position: Optional[dict] = None  # how the checkpoint's iteration moved
        self.batches_to_skip = 0  # of the epoch in progress: the checkpoint trained them
        # The runner registers a config's hooks before it builds its training loop.
        listed = [hook for hook in runner.hooks if isinstance(hook, RNGStateHook)]
        for hook in listed:
            hook.loop = self
        if not listed:
            runner.register_hook(RNGStateHook(self))

    def images_per_iter(self) -> int:
        """Images one iteration trains over all ranks."""
        batch_sampler = getattr(self.dataloader, 'batch_sampler', None)
        batch_size = getattr(batch_sampler, 'batch_size', None) or self.dataloader.batch_size
        return batch_size * get_world_size()

    def data_position(self) -> dict:
        """What a checkpoint needs to continue the epoch on any number of ranks."""
        return dict(iters_per_epoch=len(self.dataloader), images_per_iter=self.images_per_iter())

    def take_resume_state(self, checkpoint: dict) -> None:
        """Keep the generator states of a checkpoint just loaded, and map its iteration counter to
        this run's ranks x batch (no-op if equal).

        Called by :class:`RNGStateHook` after the runner has loaded the checkpoint and before it
        resumes from it: MMEngine's runners set the loop's counters from the checkpoint's ``meta``
        after its ``after_load_checkpoint`` hooks, so the converted counter is written there.
        """
        self.pending_rng_state = checkpoint.get(RNG_KEY)
        self.converted_position = None
        saved, meta = checkpoint.get(DATA_KEY), checkpoint.get('meta') or {}
        if saved is None or saved == self.data_position() or 'iter' not in meta:
            return
        iters_in_epoch = meta['iter'] - meta['epoch'] * saved['iters_per_epoch']
        images = iters_in_epoch * saved['images_per_iter']
        done, retrained = divmod(images, self.images_per_iter())
        self.converted_position = dict(saved=saved, iter=meta['iter'], images=images,
                                       retrained=retrained)
        meta['iter'] = meta['epoch'] * len(self.dataloader) + done

    def run(self) -> torch.nn.Module:
        if self.iter == 0:
            # load_from (weights only) also calls after_load_checkpoint: not a resumed run
            self.pending_rng_state = self.converted_position = None
        if self.converted_position is not None:
            self._report_converted_position(self.converted_position)
            self.converted_position = None
        self.batches_to_skip = self.iter - self.epoch * len(self.dataloader)
        if self.batches_to_skip == 0:
            self._restore_rng_state()
        return super().run()

    def run_iter(self, idx, data_batch) -> None:
        if idx >= self.batches_to_skip:
            super().run_iter(idx, data_batch)
            return
        # Trained before the checkpoint: drawn from the data (its augmentation's random draws
        # included), not trained again.
        if idx == self.batches_to_skip - 1:
            print_log(f'resumed mid-epoch: skipped the {self.batches_to_skip} batches of epoch '
                      f'{self.epoch + 1} that the checkpoint had already trained',
                      logger='current')
            self.batches_to_skip = 0
            # After the skipped batches, so that their augmentation draws do not count twice.
            self._restore_rng_state()

    def _restore_rng_state(self) -> None:
        if self.pending_rng_state is not None:
            set_rng_state(self.pending_rng_state)
            self.pending_rng_state = None

    def _report_converted_position(self, converted: dict) -> None:
        """Replay the schedules to the converted iteration and say what was converted."""
        if not hasattr(self.runner, 'build_param_scheduler'):
            raise RuntimeError(f'{type(self.runner).__name__} cannot resume on another number of '
                               'images per iteration (ranks x batch) than its checkpoint')
        self._replay_schedules()
        retrained = converted['retrained']
        print_log(f'resumed with {self.images_per_iter()} images per iteration instead of '
                  f"{converted['saved']['images_per_iter']}: iteration {converted['iter']} of the "
                  f"checkpoint is {self.iter} here ({converted['images']} images into epoch "
                  f'{self.epoch + 1}{f", {retrained} of them trained again" if retrained else ""}'
                  '); parameter schedules replayed to it', logger='current')

    def _replay_schedules(self) -> None:
        """Rebuild the parameter schedulers and step them to this iteration as this run's
        ParamSchedulerHook would have: the checkpoint's were stepped in other iterations (a
        warm-up of one epoch ends at another step), which MMEngine's chained updates cannot
        convert."""
        runner = self.runner
        if not runner.param_schedulers:
            return
        wrappers = runner.optim_wrapper
        wrappers = wrappers.values() if isinstance(wrappers, OptimWrapperDict) else [wrappers]
        for wrapper in wrappers:  # back to the values the schedulers start from
            for group in wrapper.optimizer.param_groups:
                for key in [k for k in group if k.startswith('initial_')]:
                    if key[len('initial_'):] in group:
                        group[key[len('initial_'):]] = group[key]
        runner.param_schedulers = runner.build_param_scheduler(runner.cfg.param_scheduler)
        schedulers = runner.param_schedulers
        schedulers = ([s for group in schedulers.values() for s in group]
                      if isinstance(schedulers, dict) else schedulers)
        for it in range(self.iter):
            for scheduler in schedulers:
                if not scheduler.by_epoch:
                    scheduler.step()
            if (it + 1) % len(self.dataloader) == 0:
                for scheduler in schedulers:
                    if scheduler.by_epoch:
                        scheduler.step()
