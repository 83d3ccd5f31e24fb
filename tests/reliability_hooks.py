"""A hook for tests only: SIGKILL the training process after a given iteration (a pre-emption)."""
import os
import signal

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class KillAfterIterHook(Hook):
    # After CheckpointHook and LoggerHook: the iteration is logged, like a real job's last line.
    priority = 100

    def __init__(self, after_iter: int):
        self.after_iter = after_iter

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.iter + 1 == self.after_iter:
            os.kill(os.getpid(), signal.SIGKILL)
