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


@HOOKS.register_module()
class RecordBatchesHook(Hook):
    """Append every trained batch's image files to ``WORK_DIR/batches_rank{RANK}.jsonl``, with
    the model wrapper's class and the number of parameter elements this rank holds."""

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        import json
        import os.path as osp
        samples = [osp.relpath(s.img_path, runner.train_dataloader.dataset.data_root)
                   for s in data_batch['data_samples']]
        record = dict(iter=runner.iter, epoch=runner.epoch, samples=samples,
                      model=type(runner.model).__name__,
                      numel=sum(p.numel() for p in runner.model.parameters()))
        with open(osp.join(runner.work_dir, f'batches_rank{runner.rank}.jsonl'), 'a') as f:
            f.write(json.dumps(record) + '\n')
