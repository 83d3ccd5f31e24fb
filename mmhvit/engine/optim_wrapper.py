"""Mixed precision training on any device: MMEngine's AMP wrapper refuses to start on a CPU."""
from typing import Union

import torch
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class AnyDeviceAmpOptimWrapper(AmpOptimWrapper):
    """``AmpOptimWrapper`` on GPUs; bfloat16 autocast without loss scaling on a CPU.

    bfloat16 has float32's exponent range, so its gradients do not underflow and need no loss
    scaler; float16 autocast is refused on the CPU, where it is slow and not what AMP means.
    ``tools/train.py --amp`` chooses this wrapper on a machine without a GPU.

    Args:
        loss_scale (float | str | dict): As ``AmpOptimWrapper`` (GPU only).
        dtype (str | torch.dtype, optional): Autocast dtype; None: float16 on GPUs, bfloat16 on
            the CPU.
        **kwargs: ``OptimWrapper``'s arguments.
    """

    def __init__(self, loss_scale='dynamic', dtype: Union[str, torch.dtype, None] = None,
                 **kwargs):
        if torch.cuda.is_available():
            super().__init__(loss_scale=loss_scale, dtype=dtype, **kwargs)
            return
        OptimWrapper.__init__(self, **kwargs)
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        if dtype not in (None, torch.bfloat16):
            raise ValueError(f'mixed precision on the CPU runs in bfloat16; got dtype {dtype}')
        self.cast_dtype = torch.bfloat16
        self.loss_scaler = torch.amp.GradScaler('cpu', enabled=False)  # for (load_)state_dict

    def step(self, **kwargs) -> None:
        if self.loss_scaler.is_enabled():
            super().step(**kwargs)
        else:
            # No loss scaling (the CPU): AmpOptimWrapper's step would update the scaler with a
            # setting that only its own __init__, which needs a GPU, stores.
            OptimWrapper.step(self, **kwargs)
