"""MMEngine's ``compile=True`` for detectors: the optimizer step stays eager."""
import torch
from mmengine.hooks import Hook
from mmengine.optim import OptimWrapperDict
from mmengine.registry import HOOKS


@HOOKS.register_module()
class EagerOptimizerStepHook(Hook):
    """Keeps ``optimizer.step`` out of ``torch.compile``.

    With ``compile=True`` MMEngine compiles the model's whole ``train_step``, which calls the
    optimizer; torch 2.14's dynamo stops there with an internal error on MMEngine's parameter
    groups (``InternalTorchDynamoError: 'UserDefinedDictVariable' object has no attribute
    'items'``, in ``torch/_dynamo/variables/optimizer.py``). Wrapping the step (with the param
    schedulers' counting wrapper already on it) in ``torch.compiler.disable`` makes dynamo run it
    eagerly, while forward and backward stay compiled. ``tools/train.py`` adds this hook when the
    config sets ``compile``; a config used with another launcher adds it to ``custom_hooks``.
    """

    priority = 'VERY_LOW'  # after the param schedulers have wrapped the step

    def before_train(self, runner) -> None:
        wrappers = runner.optim_wrapper
        for wrapper in (wrappers.values() if isinstance(wrappers, OptimWrapperDict) else
                        [wrappers]):
            optimizer = wrapper.optimizer
            optimizer.step = torch.compiler.disable(optimizer.step)
