"""The contract every mmhvit backbone fulfils, and the mechanisms the three families share."""
import copy
import logging
import numbers
import warnings
from abc import ABCMeta, abstractmethod
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model import BaseModule
from mmengine.model.weight_init import initialize

from ..checkpoint import read_state_dict, strip_prefix, unwrap_state_dict
from ..layers import BackboneStage, is_batch_norm, trunc_normal_init


class HViTBackbone(BaseModule, metaclass=ABCMeta):
    """Base of the families: one vocabulary, one implementation of each OpenMMLab mechanism.

    Every backbone is a stem (``patch_embed``) and ``num_stages`` stages (``stages``, each a
    :class:`BackboneStage`); output i is the map after stage i + 1 (strides 4, 8, 16, 32). Only the
    stages up to the deepest requested output are built, so that no parameter is left without a
    gradient (DDP). The base implements the argument checks, arch zoo, drop-path schedule, the
    OpenMMLab switches, initialisation and ``init_cfg`` (``Pretrained`` through the family's
    converter, position embeddings resized on load).

    A family defines the class data ``arch_zoo``, ``arch_aliases`` (short names of zoo archs),
    ``essential_keys``, ``optional_keys`` (custom-arch keys with their defaults),
    ``default_norm_cfg`` and ``default_act_cfg``, and implements the abstract methods, ``forward``
    among them: it calls :meth:`check_input` first and returns through :meth:`nchw_outputs`. The
    modules a family stacks (stems, blocks, stages) live in :mod:`mmhvit.models.layers`.

    Args:
        arch (str | dict): A name of ``arch_zoo`` (case-insensitive) or a custom arch dict.
        in_channels (int): Image channels. Default: 3.
        out_indices (Sequence[int] | int): Outputs to return, from 0..3 (negative counts from the
            end); returned in stage order. Default: all four.
        drop_rate (float): Dropout after projections and in MLPs. Default: 0.
        attn_drop_rate (float): Dropout on attention weights. Default: 0.
        drop_path_rate (float): Stochastic depth, linear from 0 over all blocks. Default: 0.1.
        qkv_bias (bool, optional): Bias of the qkv projections; None: the arch's (official).
        norm_cfg (dict, optional): Norm layers; None: the family's (``default_norm_cfg``).
        act_cfg (dict, optional): Activation; None: the family's (``default_act_cfg``).
        frozen_stages (int): -1: nothing frozen; 0: the stem; k: the stem and stages 1..k (their
            parameters never require grad and their modules stay in eval mode). Default: -1.
        norm_eval (bool): Keep BatchNorm layers in eval mode while training. Default: False.
        with_cp (bool): Gradient checkpointing of every block (less memory, more time); with
            ``lean_backward``, inverted residuals (TransCNN, HAT-Net) also run their backward a
            band of rows at a time (:mod:`mmhvit.models.layers.banded`). Default: False.
        lean_backward (bool): Recompute in backward what feeds a conv or linear layer and the
            attention weights, instead of keeping them (:mod:`mmhvit.models.layers.lean`; the
            same numbers). Default: True.
        recompute_attention (bool): With it, long attention's too (PyramidTNT's). Default: True.
        pretrained (str, optional): Deprecated, use ``init_cfg``.
        init_cfg (dict | list[dict], optional): e.g. ``dict(type='Pretrained', checkpoint=...,
            prefix='backbone.')``; official, timm, mmpretrain and our own checkpoints are
            converted on load. None: the family's official initialisation.
    """

    num_stages = 4
    arch_zoo: Dict[str, dict] = {}
    arch_aliases: Dict[str, str] = {}
    essential_keys: Tuple[str, ...] = ()
    optional_keys: Dict[str, object] = {}
    default_norm_cfg: dict = dict(type='LN')
    default_act_cfg: dict = dict(type='GELU')

    def __init__(self,
                 arch: Union[str, dict],
                 in_channels: int = 3,
                 out_indices: Union[int, Sequence[int]] = (0, 1, 2, 3),
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 qkv_bias: Optional[bool] = None,
                 norm_cfg: Optional[dict] = None,
                 act_cfg: Optional[dict] = None,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 lean_backward: bool = True,
                 recompute_attention: bool = True,
                 pretrained: Optional[str] = None,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        super().__init__(init_cfg=self._init_cfg_with_pretrained(pretrained, init_cfg))
        self._check_arguments(in_channels=in_channels, drop_rate=drop_rate,
                              attn_drop_rate=attn_drop_rate, drop_path_rate=drop_path_rate,
                              qkv_bias=qkv_bias, norm_cfg=norm_cfg, act_cfg=act_cfg,
                              frozen_stages=frozen_stages,
                              flags=dict(norm_eval=norm_eval, with_cp=with_cp,
                                         lean_backward=lean_backward,
                                         recompute_attention=recompute_attention))
        self.arch_name, self.arch_settings = self._select_arch(arch)
        self.in_channels = in_channels
        self.out_indices = self._normalise_out_indices(out_indices)
        self.num_built_stages = max(self.out_indices) + 1
        self.drop_rate, self.attn_drop_rate = drop_rate, attn_drop_rate
        self.drop_path_rate = drop_path_rate
        self.qkv_bias = self.arch_settings['qkv_bias'] if qkv_bias is None else qkv_bias
        self.norm_cfg = copy.deepcopy(norm_cfg or self.default_norm_cfg)
        self.act_cfg = copy.deepcopy(act_cfg or self.default_act_cfg)
        self.frozen_stages, self.norm_eval, self.with_cp = frozen_stages, norm_eval, with_cp

        self.stages = nn.ModuleList()
        self.stage_channels: Tuple[int, ...] = ()
        self._build_layers()
        self._check_built()
        for stage in self.stages:
            stage.with_cp = with_cp
        self.lean_backward, self.recompute_attention = lean_backward, recompute_attention
        for module in self.modules():
            if hasattr(module, 'lean'):  # the layers that recompute their inputs (layers.lean)
                module.lean = lean_backward
            if hasattr(module, 'banded_backward'):  # layers.banded: less memory, more time
                module.banded_backward = with_cp
            if hasattr(module, 'recompute_long_attention'):
                module.recompute_long_attention = recompute_attention
        self._freeze_stages()
        # Called as hook(module, state_dict, prefix, ...): the function, not the bound method.
        self.register_load_state_dict_pre_hook(HViTBackbone._resize_pos_embed_hook)

    # --- what a family implements -------------------------------------------------------------
    @abstractmethod
    def _build_layers(self) -> None:
        """Build ``patch_embed``, ``stages`` (the first ``num_built_stages``) and set
        ``stage_channels`` (the channels of each of the ``num_stages`` outputs)."""

    @abstractmethod
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """A tuple of contiguous NCHW maps, one per ``out_indices`` entry, of ceil(H / s) x
        ceil(W / s): :meth:`check_input`, the stem, each built stage in turn, the requested
        outputs through :meth:`nchw_outputs`."""

    def init_default_weights(self) -> None:
        """The family's official initialisation (used when no ``init_cfg`` says otherwise);
        by default truncated normal (std .02) linears and convs, zero biases, unit norms."""
        trunc_normal_init(self)

    @abstractmethod
    def convert_checkpoint(self, state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Official / timm / mmpretrain layouts -> this backbone's keys (no head); ours pass."""

    @abstractmethod
    def describe_checkpoint(self, state_dict: Dict[str, torch.Tensor]) -> str:
        """The arch a converted state dict was made for (for error messages)."""

    def pos_embed_keys(self) -> Tuple[str, ...]:
        """Position embeddings that a checkpoint may hold at another size (resized on load)."""
        return ()

    def resize_pos_embed(self, key: str, value: torch.Tensor) -> Optional[torch.Tensor]:
        """``value`` of position embedding ``key`` resized to this model's; None if it cannot be
        (the shape mismatch is then reported as one)."""
        return None

    # --- arguments ----------------------------------------------------------------------------
    @staticmethod
    def _init_cfg_with_pretrained(pretrained, init_cfg):
        if pretrained is None:
            return init_cfg
        if not isinstance(pretrained, str):
            raise TypeError(f'pretrained must be a str (a checkpoint path or URL) or None, got '
                            f'{type(pretrained).__name__}')
        if init_cfg is not None:
            raise ValueError('init_cfg and pretrained cannot be set at the same time')
        warnings.warn('"pretrained" is deprecated; use init_cfg=dict(type="Pretrained", '
                      'checkpoint=...)', DeprecationWarning)
        return dict(type='Pretrained', checkpoint=pretrained)

    def _check_arguments(self, in_channels, drop_rate, attn_drop_rate, drop_path_rate, qkv_bias,
                         norm_cfg, act_cfg, frozen_stages, flags) -> None:
        name = type(self).__name__
        if not _is_int(in_channels) or in_channels < 1:
            raise TypeError(f'{name}: in_channels must be a positive int, got {in_channels!r}')
        for arg, value in (('drop_rate', drop_rate), ('attn_drop_rate', attn_drop_rate),
                           ('drop_path_rate', drop_path_rate)):
            if not isinstance(value, numbers.Real) or isinstance(value, bool) \
                    or not 0 <= value < 1:
                raise ValueError(f'{name}: {arg} must be a number in [0, 1), got {value!r}')
        for arg, value in flags.items():
            if not isinstance(value, bool):
                raise TypeError(f'{name}: {arg} must be a bool, got {value!r}')
        if qkv_bias is not None and not isinstance(qkv_bias, bool):
            raise TypeError(f'{name}: qkv_bias must be a bool or None, got {qkv_bias!r}')
        for arg, value in (('norm_cfg', norm_cfg), ('act_cfg', act_cfg)):
            if value is not None and not (isinstance(value, dict) and 'type' in value):
                raise TypeError(f'{name}: {arg} must be a dict with a "type" or None, got '
                                f'{value!r}')
        if not _is_int(frozen_stages) or not -1 <= frozen_stages <= self.num_stages:
            raise ValueError(f'{name}: frozen_stages must be an int in -1..{self.num_stages} '
                             f'(-1 nothing, 0 the stem, k the stem and stages 1..k), got '
                             f'{frozen_stages!r}')

    def _normalise_out_indices(self, out_indices) -> Tuple[int, ...]:
        name = type(self).__name__
        if _is_int(out_indices):
            out_indices = (out_indices, )
        if not isinstance(out_indices, Sequence) or not out_indices \
                or not all(_is_int(i) for i in out_indices):
            raise TypeError(f'{name}: out_indices must be an int or a non-empty sequence of ints, '
                            f'got {out_indices!r}')
        indices = [i + self.num_stages if i < 0 else i for i in out_indices]
        if any(not 0 <= i < self.num_stages for i in indices) or len(set(indices)) != len(indices):
            raise ValueError(f'{name}: out_indices {tuple(out_indices)} must name distinct '
                             f'outputs in 0..{self.num_stages - 1} (strides 4 to 32; there is '
                             f'no stride-64 output)')
        return tuple(sorted(indices))

    @classmethod
    def parse_arch(cls, arch: Union[str, dict]) -> dict:
        """A fresh settings dict for a zoo name (case-insensitive) or a custom arch dict.

        A custom dict must hold every ``essential_keys`` entry and nothing outside those and
        ``optional_keys``, whose defaults fill what it leaves out.
        """
        name = cls.__name__
        allowed = f'{list(cls.essential_keys)} (optional: {list(cls.optional_keys)})'
        if isinstance(arch, str):
            zoo_name = cls.zoo_name(arch)
            if zoo_name not in cls.arch_zoo:
                raise ValueError(f'{name}: unknown arch {arch!r}; valid names: '
                                 f'{sorted([*cls.arch_zoo, *cls.arch_aliases])}, or a dict '
                                 f'with the keys {allowed}')
            arch = cls.arch_zoo[zoo_name]
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

    @classmethod
    def zoo_name(cls, arch: str) -> str:
        """The ``arch_zoo`` name of an arch name or alias, case-insensitive (``'T'`` ->
        ``'tiny'``)."""
        return cls.arch_aliases.get(arch.lower(), arch.lower())

    def _select_arch(self, arch) -> Tuple[str, dict]:
        settings = self.check_arch(self.parse_arch(arch))
        if isinstance(arch, str):
            return self.zoo_name(arch), settings
        for name in self.arch_zoo:
            if self.parse_arch(name) == settings:
                return name, settings
        return f'custom {settings}', settings

    def check_arch(self, settings: dict) -> dict:
        """Validate (and normalise) parsed arch settings; the family adds its own rules."""
        name = type(self).__name__
        for key in ('depths', 'embed_dims', 'num_heads'):
            values = settings.get(key)
            if isinstance(values, (list, tuple)) and len(values) != self.num_stages:
                raise ValueError(f'{name}: arch {key} needs {self.num_stages} values (one per '
                                 f'stage), got {list(values)}')
        return settings

    def _check_built(self) -> None:
        if len(self.stages) != self.num_built_stages or len(
                self.stage_channels) != self.num_stages:
            raise RuntimeError(f'{type(self).__name__}._build_layers must build '
                               f'{self.num_built_stages} stages and name {self.num_stages} '
                               'stage channels')
        if not all(isinstance(stage, BackboneStage) for stage in self.stages):
            raise TypeError(f'{type(self).__name__}: every stage must be a BackboneStage')

    @property
    def out_channels(self) -> Tuple[int, ...]:
        """Channels of each returned map, in ``out_indices`` order (a neck's ``in_channels``)."""
        return tuple(self.stage_channels[i] for i in self.out_indices)

    def drop_path_schedule(self, depths: Sequence[int]) -> List[List[float]]:
        """Per-stage drop-path rates, linear from 0 to ``drop_path_rate`` over all blocks."""
        total = sum(depths)
        rates = [self.drop_path_rate * i / max(total - 1, 1) for i in range(total)]
        starts = [sum(depths[:i]) for i in range(len(depths))]
        return [rates[start:start + depth] for start, depth in zip(starts, depths)]

    # --- forward ------------------------------------------------------------------------------
    @staticmethod
    def nchw_outputs(outs: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, ...]:
        """The requested outputs as a tuple of contiguous NCHW tensors.

        Contiguous whatever layout a stage ran in: mmcv's RoIAlign (CPU and CUDA) reads its input's
        memory as NCHW and ignores strides, so a channels-last map (the H-MHSA families' maps,
        TNT's token grids) gives Mask R-CNN's heads features from the wrong pixels and channels.
        FPN convs keep the layout they are given, so the neck would pass it on.
        """
        return tuple(out.contiguous() for out in outs)

    def check_input(self, x: torch.Tensor) -> None:
        """One clear error for an input this backbone cannot take.

        Only what the tensor's metadata tells (rank, channels, size, dtype): reading its values
        (NaN / Inf) would synchronise the host with a GPU on every forward. Images are checked for
        non-finite values where they enter instead (:func:`mmhvit.apis.check_image_file`).
        """
        name = type(self).__name__
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f'{name} expects an NCHW batch tensor, got {shape}')
        if x.shape[1] != self.in_channels:
            raise ValueError(f'{name} was built for {self.in_channels} input channels, got '
                             f'{x.shape[1]} (input shape {tuple(x.shape)})')
        if min(x.shape[-2:]) < 1:
            raise ValueError(f'{name} needs images of at least 1x1 pixel, got '
                             f'{x.shape[-2]}x{x.shape[-1]}')
        if not x.is_floating_point():
            raise TypeError(f'{name} expects a floating-point image tensor (normalised, e.g. by '
                            f'the data preprocessor), got dtype {x.dtype}')

    # --- depth order (layer-wise learning-rate decay) -----------------------------------------
    def layer_ids(self) -> Tuple[Dict[str, int], int]:
        """``({parameter name: layer id}, number of blocks)``: the stem is layer 0 and the blocks
        are layers 1..N in forward order; a stage's modules registered before its ``blocks``
        (downsample, position embedding) share its first block's layer, those after them (output
        norms and rescaling, which the heads read, as BEiT's final norm) are layer N + 1, the
        neck's."""
        total = sum(len(stage.blocks) for stage in self.stages)
        ids, done = {}, 0
        for name, _ in self.patch_embed.named_parameters():
            ids['patch_embed.' + name] = 0
        for index, stage in enumerate(self.stages):
            depth = len(stage.blocks)
            after_blocks = False
            for child_name, child in stage.named_children():
                if child_name == 'blocks':
                    after_blocks = True
                    for j, block in enumerate(child):
                        for name, _ in block.named_parameters():
                            ids[f'stages.{index}.blocks.{j}.{name}'] = done + 1 + j
                    continue
                layer = total + 1 if after_blocks else min(done + 1, done + depth)
                for name, _ in child.named_parameters():
                    ids[f'stages.{index}.{child_name}.{name}'] = layer
            for name, _ in stage.named_parameters(recurse=False):
                ids[f'stages.{index}.{name}'] = min(done + 1, done + depth)
            done += depth
        missing = [name for name, _ in self.named_parameters() if name not in ids]
        if missing:
            raise RuntimeError(f'{type(self).__name__}.layer_ids: no layer for {missing[:3]}')
        return ids, done

    # --- freezing, norm_eval ------------------------------------------------------------------
    def stage_modules(self, index: int) -> List[nn.Module]:
        """The stem (index 0) or stage ``index`` (1-based); [] for a stage that is not built."""
        if index == 0:
            return [self.patch_embed]
        return [self.stages[index - 1]] if index <= len(self.stages) else []

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
                if is_batch_norm(module):
                    module.eval()
        return self

    # --- initialisation and checkpoints ---------------------------------------------------------
    def init_weights(self) -> None:
        """The official initialisation (or the non-``Pretrained`` ``init_cfg`` entries), then
        every ``Pretrained`` entry through the family's converter."""
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else \
            [self.init_cfg] if self.init_cfg else []
        pretrained = [c for c in cfgs if c.get('type') == 'Pretrained']
        others = [c for c in cfgs if c.get('type') != 'Pretrained']
        if others:
            initialize(self, others)
        else:
            self.init_default_weights()
        for cfg in pretrained:
            self.load_pretrained(cfg['checkpoint'], cfg.get('prefix'))
        self.is_init = True

    def load_pretrained(self, filename: str, prefix: Optional[str] = None) -> None:
        """Load a checkpoint file or URL of any known layout (keys under ``prefix`` only)."""
        state_dict = unwrap_state_dict(strip_prefix(read_state_dict(filename), prefix, filename))
        self.load_converted(self.convert_checkpoint(state_dict), source=filename)

    def load_converted(self, state_dict: Dict[str, torch.Tensor],
                       source: str = 'checkpoint') -> None:
        """Load an already converted state dict non-strictly, after checking that it fits.

        Every shape mismatch is collected first; when there is any, loading fails with one error
        that names the checkpoint's arch and this model's. Missing and unexpected keys are
        logged, never dropped silently.
        """
        own = self.state_dict()
        resizable = set(self.pos_embed_keys())
        mismatched = [
            f'{key}: checkpoint {tuple(value.shape)} vs model {tuple(own[key].shape)}'
            for key, value in state_dict.items()
            if key in own and value.shape != own[key].shape and key not in resizable
        ]
        if mismatched:
            raise ValueError(
                f'{source} was made for {type(self).__name__} arch '
                f'{self.describe_checkpoint(state_dict)}, but this model is arch {self.arch_name}; '
                f'{len(mismatched)} tensors differ in shape, e.g. ' + '; '.join(mismatched[:3]))
        unexpected = [key for key in state_dict if key not in own]
        missing = [key for key in own if key not in state_dict]
        # Partial checkpoints are fine (a stem only, or a deeper model's); most of both sides
        # failing to meet is another family's checkpoint, converted to nothing that fits.
        if len(unexpected) > len(state_dict) / 2 and len(missing) > len(own) / 2:
            raise ValueError(
                f'{source} is not a {type(self).__name__} checkpoint: {len(unexpected)} of its '
                f'{len(state_dict)} tensors are not keys of this model, and {len(missing)} of the '
                f"model's {len(own)} are missing (its keys look like {unexpected[:3]}; this model "
                f'expects keys like {missing[:3]})')
        result = self.load_state_dict(state_dict, strict=False)
        if result.missing_keys:
            print_log(f'{source}: {len(result.missing_keys)} missing keys (left at their initial '
                      f'values): {result.missing_keys}', logger='current', level=logging.WARNING)
        if result.unexpected_keys:
            print_log(f'{source}: {len(result.unexpected_keys)} unexpected keys (ignored): '
                      f'{result.unexpected_keys}', logger='current', level=logging.WARNING)
        if not result.missing_keys and not result.unexpected_keys:
            print_log(f'{source}: all {len(state_dict)} tensors loaded', logger='current')

    def _resize_pos_embed_hook(self, state_dict, prefix, *args, **kwargs) -> None:
        own = dict(self.named_parameters())
        for key in self.pos_embed_keys():
            value = state_dict.get(prefix + key)
            if value is None or key not in own or value.shape == own[key].shape:
                continue
            resized = self.resize_pos_embed(key, value)
            if resized is None:
                continue  # a genuine mismatch: load_state_dict reports it
            state_dict[prefix + key] = resized
            print_log(f'{type(self).__name__}: resized {key} from {tuple(value.shape)} to '
                      f'{tuple(resized.shape)}', logger='current')


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def image_size_pair(owner: str, size) -> Tuple[int, int]:
    """``pretrain_img_size`` as (height, width), from an int or a pair of positive ints."""
    pair = (size, size) if _is_int(size) else size
    if not (isinstance(pair, Sequence) and len(pair) == 2
            and all(_is_int(side) and side > 0 for side in pair)):
        raise ValueError(f'{owner}: pretrain_img_size must be a positive int or a pair '
                         f'(height, width) of positive ints, got {size!r}')
    return tuple(pair)
