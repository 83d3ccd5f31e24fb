"""Whole checkpoint files -> MMPretrain classifier checkpoints: ``mmhvit convert FAMILY SRC DST``.

SRC is read weights-only (``.pth``, ``.pth.tar`` or ``.safetensors``; containers and wrappers
unwrapped, :func:`~mmhvit.models.checkpoint.read_state_dict`), converted by the family's module of
:mod:`mmhvit.models.converters` with its classifier, and written to DST as ``state_dict``
(``backbone.*``, ``head.fc.*``) with plain ``meta``: it loads into the family's ImageNet config
(``FAMILIES[family].config``) and reproduces the source model's logits. A file of another family
or layout is refused with one error that names SRC, before anything is written.
"""
import functools
import os.path as osp
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import torch

from ..backbones import TNT, HATNet, NesT, PyramidTNT, TransCNN
from ..checkpoint import read_state_dict, save_converted_classifier
from .hatnet import convert_hatnet_checkpoint, is_official_hatnet
from .hmhsa import describe_hmhsa_checkpoint, is_official_hmhsa_layout
from .nest import convert_nest_checkpoint, describe_nest_checkpoint
from .ptnt import convert_ptnt_checkpoint, describe_ptnt_checkpoint, detect_ptnt_layout
from .tnt import convert_tnt_checkpoint, describe_tnt_checkpoint, detect_tnt_layout
from .transcnn import convert_transcnn_checkpoint

StateDict = Dict[str, torch.Tensor]


def _official_hmhsa(src: str, state_dict: StateDict, convert: Callable, is_official: Callable,
                    backbone: type, other: str) -> Tuple[StateDict, dict]:
    """TransCNN or HAT-Net: the official layout of the right release only (``other``: the
    family that converts the other release's files)."""
    try:
        converted = convert(state_dict, with_head=True)
    except ValueError as error:  # the other release's checkpoint
        raise ValueError(f'{src}: {error} (convert it with: mmhvit convert {other} SRC DST)'
                         ) from None
    if not is_official(state_dict):
        raise ValueError(f'{src} does not have the official {backbone.__name__} layout '
                         f'(patch_embed.0, blocks.*, ds2-4, classifier.1)')
    return converted, dict(arch=describe_hmhsa_checkpoint(converted, backbone))


_transcnn = functools.partial(_official_hmhsa, convert=convert_transcnn_checkpoint,
                              is_official=is_official_hmhsa_layout, backbone=TransCNN,
                              other='hatnet')
_hatnet = functools.partial(_official_hmhsa, convert=convert_hatnet_checkpoint,
                            is_official=is_official_hatnet, backbone=HATNet, other='transcnn')


def _nest(src: str, state_dict: StateDict, num_heads: Optional[Sequence[int]] = None
          ) -> Tuple[StateDict, dict]:
    converted = convert_nest_checkpoint(state_dict, num_heads=num_heads, with_head=True)
    if 'stages.0.pos_embed' not in converted or 'patch_embed.proj.weight' not in converted:
        raise ValueError(f'{src} is not a NesT checkpoint (timm nest_* or mmhvit NesT): it has no '
                         f'levels.0.pos_embed and patch_embed.proj keys; first keys: '
                         f'{sorted(state_dict)[:6]}')
    return converted, dict(arch=describe_nest_checkpoint(converted, NesT))


def _tnt(src: str, state_dict: StateDict) -> Tuple[StateDict, dict]:
    try:
        converted = convert_tnt_checkpoint(state_dict, with_head=True)
        # The layout of the backbone's keys (an MMPretrain classifier nests them in backbone.*).
        layout = detect_tnt_layout({k[len('backbone.'):]: v for k, v in state_dict.items()
                                    if k.startswith('backbone.')} or state_dict)
    except ValueError as error:
        raise ValueError(f'{src}: {error}') from None
    arch = describe_tnt_checkpoint(converted, TNT)
    return converted, dict(arch=arch, source_layout=layout, legacy='legacy' in arch)


def _ptnt(src: str, state_dict: StateDict, arch: Optional[str] = None
          ) -> Tuple[StateDict, dict]:
    """The official layout only; with ``arch``, of that arch only."""
    try:
        layout = detect_ptnt_layout(state_dict)
    except ValueError as error:
        raise ValueError(f'{src}: {error}') from None
    if layout != 'official':
        raise ValueError(f"{src} already has mmhvit's PyramidTNT keys: load it directly "
                         '(init_cfg Pretrained), it needs no conversion')
    converted = convert_ptnt_checkpoint(state_dict, with_head=True)
    described = describe_ptnt_checkpoint(converted, PyramidTNT)
    if arch is not None:
        settings = PyramidTNT.parse_arch(arch)  # one error for an unknown name
        wanted = next(name for name in PyramidTNT.arch_zoo
                      if len(name) > 2 and PyramidTNT.parse_arch(name) == settings)
        if described != wanted:
            raise ValueError(f'{src} is a PyramidTNT {described} checkpoint, not {wanted}')
    return converted, dict(arch=described, source_layout=layout)


class Family(NamedTuple):
    """How one family's files convert: ``convert(src, state_dict, **options)`` returns our keys
    and the meta to record; ``config`` is the ImageNet config the result loads into."""
    backbone: type
    convert: Callable[..., Tuple[StateDict, dict]]
    config: str


FAMILIES = {
    'transcnn': Family(TransCNN, _transcnn, 'configs/transcnn_b_in1k.py'),
    'hatnet': Family(HATNet, _hatnet, 'configs/hatnet_s_in1k.py'),
    'nest': Family(NesT, _nest, 'configs/nest_t_in1k.py'),
    'tnt': Family(TNT, _tnt, 'configs/tnt_s_in1k.py'),
    'ptnt': Family(PyramidTNT, _ptnt, 'configs/ptnt_s_in1k.py'),
}


def convert_file(family: str, src: str, dst: str, **options) -> dict:
    """Convert checkpoint file ``src`` of ``family`` into an MMPretrain classifier checkpoint.

    Args:
        family: A key of :data:`FAMILIES` ('transcnn', 'hatnet', 'nest', 'tnt', 'ptnt').
        src: The checkpoint to convert (``.pth``, ``.pth.tar`` or ``.safetensors``), a path or
            an ``http(s)://`` URL (downloaded once into the torch hub cache).
        dst: The ``.pth`` to write; its folder must exist.
        **options: The family's own: ``num_heads`` (NesT: heads per level, for custom archs
            whose heads are not channels / 32); ``arch`` (PyramidTNT: refuse a file of another
            arch).

    Returns:
        dict: The meta written with the weights (``arch``, ``source``, ``converter`` and the
        head's ``num_classes`` / ``head_in_channels``; TNT adds ``source_layout`` and ``legacy``,
        PyramidTNT ``source_layout``).

    Raises:
        KeyError: An unknown family.
        FileNotFoundError: ``src`` or the folder of ``dst`` is missing.
        ValueError, TypeError, pickle.UnpicklingError: ``src`` is not a checkpoint of the family
            (:func:`~mmhvit.models.checkpoint.read_state_dict` names each kind of bad file).
    """
    if family not in FAMILIES:
        raise KeyError(f'unknown family {family!r}; one of {sorted(FAMILIES)}')
    out_dir = osp.dirname(osp.abspath(dst))
    if not osp.isdir(out_dir):
        raise FileNotFoundError(f'the folder of {dst} ({out_dir}) does not exist')
    converted, meta = FAMILIES[family].convert(src, read_state_dict(src), **options)
    return save_converted_classifier(converted, src, dst, meta.pop('arch'),
                                     f'mmhvit convert {family}', **meta)


def conversion_summary(family: str, src: str, dst: str, meta: dict) -> str:
    """The line that tells what was converted and how the family's config loads it."""
    spec = FAMILIES[family]
    arch = meta['arch'].replace(' (legacy)', '')
    settings = [f'model.backbone.arch={arch!r}'] if arch in spec.backbone.arch_zoo else []
    if meta.get('legacy'):
        settings.append('model.backbone.legacy=True')
    if 'head_in_channels' in meta:
        settings.append(f'model.head.in_channels={meta["head_in_channels"]}')
    layout = f', {meta["source_layout"]} layout' if 'source_layout' in meta else ''
    return (f'{src} ({spec.backbone.__name__} {meta["arch"]}{layout}) -> {dst}; config: '
            f'{spec.config}' + (' with ' + ', '.join(settings) if settings else ''))
