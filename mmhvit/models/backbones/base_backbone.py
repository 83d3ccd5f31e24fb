import copy
import warnings
from typing import List, Optional, Sequence, Union

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from torch.nn.modules.batchnorm import _BatchNorm

from ..checkpoint import load_converted_state_dict, read_state_dict, strip_prefix

MIN_INPUT_SIZE = 32


class HViTBackbone(BaseModule):
    """What the three backbones share: the OpenMMLab contract around their own layers.

    Subclasses define ``arch_zoo``, ``essential_keys`` and ``optional_keys`` (read by
    ``parse_arch``), set ``self.arch_name``, call ``self._freeze_stages()`` at the end of ``__init__``, and
    implement ``stage_modules`` (module lists for the stem and
    each of the ``num_stages`` stages, for ``frozen_stages``), ``convert_checkpoint`` (official
    layouts -> ours; our own keys pass through) and ``describe_checkpoint`` (the arch a state dict
    was made for). ``init_cfg=dict(type='Pretrained', checkpoint=..., prefix=...)`` loads through
    the converter; other ``init_cfg`` types go to MMEngine.

    Args:
        in_channels (int): Image channels.
        out_indices (Sequence[int]): Which outputs (0..num_outputs-1) to return.
        frozen_stages (int): -1: nothing frozen; 0: the stem; i: the stem and stages 1..i.
        norm_eval (bool): Keep norm layers (BN statistics) in eval mode during training.
        with_cp (bool): Gradient checkpointing of the blocks (saves memory, costs time).
        pretrained (str, optional): Deprecated; use ``init_cfg``.
        init_cfg (dict, optional): Initialisation config.
    """

    num_outputs = 4
    arch_zoo: dict = {}
    essential_keys: tuple = ()
    optional_keys: dict = {}  # custom-arch keys that may be left out, with their defaults

    def __init__(self,
                 in_channels: int = 3,
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 pretrained: Optional[str] = None,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        if pretrained is not None:
            if init_cfg is not None:
                raise ValueError('init_cfg and pretrained cannot be set at the same time')
            warnings.warn('"pretrained" is deprecated; use init_cfg=dict(type="Pretrained", '
                          'checkpoint=...)', DeprecationWarning)
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        super().__init__(init_cfg=init_cfg)
        if isinstance(out_indices, int):
            out_indices = (out_indices, )
        out_indices = tuple(i + self.num_outputs if i < 0 else i for i in out_indices)
        if not out_indices or any(not 0 <= i < self.num_outputs for i in out_indices):
            raise ValueError(f'out_indices {out_indices} must name outputs in '
                             f'0..{self.num_outputs - 1}')
        self.in_channels = in_channels
        self.out_indices = out_indices
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp

    # --- to implement -------------------------------------------------------------------------
    def stage_modules(self, index: int) -> List[nn.Module]:
        """Modules of the stem (index 0) or of stage ``index`` (1-based), for freezing."""
        raise NotImplementedError

    def convert_checkpoint(self, state_dict: dict) -> dict:
        raise NotImplementedError

    def describe_checkpoint(self, state_dict: dict) -> str:
        raise NotImplementedError

    def is_resizable_key(self, key: str) -> bool:
        """Keys whose shape may differ from the model's (resized on load, e.g. position embeddings)."""
        return False

    # --- shared behaviour ---------------------------------------------------------------------
    @classmethod
    def parse_arch(cls, arch: Union[str, dict]) -> dict:
        """A fresh settings dict for a zoo name (case-insensitive) or a custom arch dict.

        A custom dict must hold every ``essential_keys`` entry and nothing outside those and
        ``optional_keys``, whose defaults fill what it leaves out.
        """
        name = cls.__name__
        allowed = f'{list(cls.essential_keys)} (optional: {list(cls.optional_keys)})'
        if isinstance(arch, str):
            if arch.lower() not in cls.arch_zoo:
                raise ValueError(f'{name}: unknown arch {arch!r}; valid names: '
                                 f'{sorted(cls.arch_zoo)}, or a dict with the keys {allowed}')
            arch = cls.arch_zoo[arch.lower()]
        elif isinstance(arch, dict):
            missing = [k for k in cls.essential_keys if k not in arch]
            unknown = sorted(set(arch) - set(cls.essential_keys) - set(cls.optional_keys))
            if missing or unknown:
                raise ValueError(f'{name}: a custom arch dict needs the keys {allowed}; missing '
                                 f'{missing}, unknown {unknown}')
        else:
            raise TypeError(f'{name}: arch must be a str or a dict, got {type(arch).__name__}')
        settings = copy.deepcopy(dict(cls.optional_keys))
        settings.update(copy.deepcopy(arch))
        return settings

    def check_input(self, x: torch.Tensor) -> None:
        """One clear error for an input this backbone cannot take."""
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects an NCHW batch, got a tensor of shape '
                             f'{tuple(x.shape)}')
        if x.shape[1] != self.in_channels:
            raise ValueError(f'{type(self).__name__} was built for {self.in_channels} input '
                             f'channels, got {x.shape[1]} (input shape {tuple(x.shape)})')
        if min(x.shape[-2:]) < MIN_INPUT_SIZE:
            raise ValueError(f'{type(self).__name__} needs images of at least {MIN_INPUT_SIZE}x'
                             f'{MIN_INPUT_SIZE} pixels, got {x.shape[-2]}x{x.shape[-1]}')

    def _freeze_stages(self) -> None:
        for index in range(self.frozen_stages + 1):
            for module in self.stage_modules(index):
                module.eval()
                for param in module.parameters():
                    param.requires_grad = False

    def train(self, mode: bool = True):
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()
        return self

    def init_weights(self) -> None:
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            filename = cfg['checkpoint']
            state_dict = strip_prefix(read_state_dict(filename), cfg.get('prefix'), filename)
            load_converted_state_dict(self, self.convert_checkpoint(state_dict), source=filename)
            self._is_init = True
            return
        super().init_weights()
