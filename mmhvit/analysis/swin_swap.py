"""Swin's models with our backbones: every model that MMDetection, MMSegmentation and MMPretrain
ship with a ``SwinTransformer`` backbone, found in their packaged configs, grouped by structure,
and each group's representative config with its backbone replaced by one of ours (the swap and the
training / prediction step: :mod:`.swin_swap_run`).

- :func:`discover`: the packaged configs (``<package>/.mim/configs/**.py``) whose resolved model has
  Swin's backbone, and those left out, each with its reason (a language model, video inputs, no
  head, a config that does not load, another Swin variant).
- :func:`group_models`: one :class:`Group` per model structure: the model type, its necks and heads
  (with the heads and decoders they hold), the Swin levels the model reads, the image channels and
  the optimiser constructor; the representative is the config with the smallest Swin.
- :func:`rotation`: which groups the suite runs with which family (every group once, families in
  turn, then more runs until each family has met every kind of neck and head).
"""
import functools
import glob
import importlib
import os.path as osp
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from mmengine.config import Config

PACKAGES = ('mmdet', 'mmseg', 'mmpretrain')
SWIN_TYPES = ('SwinTransformer', 'SwinTransformerV2')
# Keys of a model dict that hold a head; inside a head, keys naming the heads and decoders it holds.
HEAD_KEY = re.compile(r'(^|_)head$')
INNER_KEY = re.compile(r'(head|decoder)$')
# What a head does with the maps, for the rotation's coverage; a type not listed is its own kind.
HEAD_KINDS = {
    'RetinaHead': 'one-stage dense', 'FCOSHead': 'one-stage dense', 'ATSSHead': 'one-stage dense',
    'RTMDetSepBNHead': 'one-stage dense', 'RPNHead': 'two-stage RoI',
    'StandardRoIHead': 'two-stage RoI', 'CascadeRoIHead': 'two-stage RoI', 'DINOHead': 'DETR',
    'DDQDETRHead': 'DETR', 'DeformableDETRHead': 'DETR',
    'MaskFormerHead': 'mask classification', 'Mask2FormerHead': 'mask classification',
    'MaskFormerFusionHead': 'mask classification', 'IterativeDecodeHead': 'mask classification',
    'UPerHead': 'pixel decoder', 'FCNHead': 'pixel decoder', 'LinearClsHead': 'classifier',
}
NO_NECK = 'none (heads read the maps)'
_QUOTED_PY = re.compile(r'''['"]([^'"\s]+\.py)['"]''')


def configs_root(package: str) -> str:
    """The packaged configs of ``package`` (``<package>/.mim/configs``)."""
    return osp.join(osp.dirname(importlib.import_module(package).__file__), '.mim', 'configs')


def short_type(cfg: dict) -> str:
    """A module dict's type without its scope ('mmdet.FPN' -> 'FPN')."""
    return str(cfg.get('type', '')).split('.')[-1]


@dataclass(eq=False)
class SwinModel:
    """One packaged config with a Swin backbone: its package, path and resolved model dict."""
    package: str
    path: str  # relative to configs_root(package)
    model: dict = field(repr=False)
    optim_constructor: Optional[str] = None  # the config's optim_wrapper constructor, if any

    @property
    def name(self) -> str:
        return f'{self.package}::{self.path}'

    @property
    def file(self) -> str:
        return osp.join(configs_root(self.package), self.path)


def _read_configs(packages: Sequence[str]) -> Dict[str, Tuple[str, str]]:
    """{absolute path: (package, text)} of every packaged config."""
    files = {}
    for package in packages:
        for path in glob.glob(osp.join(configs_root(package), '**', '*.py'), recursive=True):
            with open(path, encoding='utf-8') as f:
                files[osp.normpath(path)] = (package, f.read())
    return files


def _referenced(path: str, text: str) -> List[str]:
    """The config files ``text`` names (its bases): relative paths and ``package::`` ones."""
    found = []
    for ref in _QUOTED_PY.findall(text):
        if '::' in ref:
            package, ref = ref.split('::', 1)
            if package not in PACKAGES:
                continue
            found.append(osp.normpath(osp.join(configs_root(package), ref)))
        else:
            found.append(osp.normpath(osp.join(osp.dirname(path), ref)))
    return found


def _mentioning(files: Dict[str, Tuple[str, str]], refs: Dict[str, List[str]], word: str):
    """The configs whose text or whose bases' text (at any depth) contains ``word``."""
    found = {path for path, (_, text) in files.items() if word in text}
    grew = True
    while grew:
        grew = False
        for path in files.keys() - found:
            if any(ref in found for ref in refs[path]):
                found.add(path)
                grew = True
    return found


def _swin_candidates(packages: Sequence[str]) -> List[Tuple[str, str, bool]]:
    """(package, absolute path, whether it sets a language model) of every model config (not a
    ``_base_`` part) whose text or whose bases' text mentions Swin's backbone: a config can only
    resolve to a Swin backbone that way, and resolving these few instead of all the packaged
    configs takes seconds, not minutes."""
    files = _read_configs(packages)
    refs = {path: _referenced(path, text) for path, (_, text) in files.items()}
    swin = _mentioning(files, refs, 'SwinTransformer')
    language = _mentioning(files, refs, 'language_model=')
    return sorted((files[path][0], path, path in language) for path in swin
                  if '_base_' not in path[len(configs_root(files[path][0])):].split(osp.sep))


def skip_reason(package: str, model: dict) -> Optional[str]:
    """Why a resolved Swin model is left out of the swap, or None: it needs a language model or
    video, or it has no head (a feature extractor: nothing to train or predict with)."""
    if 'language_model' in model:
        return 'needs a language model (a text encoder: its config sets language_model)'
    if package == 'mmdet':
        from mmdet.models.mot import BaseMOTModel
        from mmdet.registry import MODELS
        if issubclass(MODELS.get(model.type), BaseMOTModel):
            return 'takes video (a clip per sample, instance tracking)'
    if not heads_of(model):
        return 'no head: a feature extractor, nothing to train or predict with'
    return None


def discover(packages: Sequence[str] = PACKAGES) -> Tuple[List[SwinModel], Dict[str, str]]:
    """The packaged Swin models, and {config name: why it is left out} for the configs that
    mention Swin but are not taken: see :func:`skip_reason`, a config that does not load, and a
    backbone that is another Swin variant (SimMIM's masked one). The packages' configs do not
    change while a process runs: later calls return copies of the first call's answer."""
    found, skipped = _discover(tuple(packages))
    return list(found), dict(skipped)


@functools.lru_cache(maxsize=None)
def _discover(packages: Tuple[str, ...]):
    found, skipped = [], {}
    for package, path, language in _swin_candidates(packages):
        name = f'{package}::{osp.relpath(path, configs_root(package))}'
        if language:  # GLIP, Grounding DINO: their text encoder (BERT) is all that is left
            skipped[name] = 'needs a language model (a text encoder: its config sets ' \
                'language_model)'
            continue
        try:
            cfg = Config.fromfile(path)
        except Exception as error:  # an upstream config that does not resolve
            skipped[name] = f'the config does not load: {_first_line(error)}'
            continue
        model = cfg.get('model')
        backbone = short_type(model.get('backbone', {})) if model else ''
        if backbone not in SWIN_TYPES:
            if 'Swin' in backbone:
                skipped[name] = f'its backbone is {backbone}, not SwinTransformer'
            continue
        reason = skip_reason(package, model)
        if reason:
            skipped[name] = reason
        else:
            constructor = cfg.get('optim_wrapper', {}).get('constructor')
            found.append(SwinModel(package, osp.relpath(path, configs_root(package)), model,
                                   optim_constructor=constructor))
    return tuple(found), skipped


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f'{type(error).__name__}: {lines[0] if lines else ""}'.rstrip(': ')


def _swin_class(package: str, backbone: dict):
    return importlib.import_module(f'{package}.registry').MODELS.get(short_type(backbone))


def swin_widths(package: str, backbone: dict) -> List[int]:
    """The channels of each level Swin's backbone dict builds (MMPretrain: from its arch)."""
    if package == 'mmpretrain':
        arch = backbone.get('arch', 'tiny')
        settings = arch if isinstance(arch, dict) else _swin_class(package, backbone).arch_zoo[
            arch.lower()]
        embed_dims, levels = settings['embed_dims'], len(settings['depths'])
    else:
        embed_dims, levels = backbone.get('embed_dims', 96), len(backbone.get('depths', [0] * 4))
    return [embed_dims * 2**i for i in range(levels)]


def swin_levels(package: str, backbone: dict) -> Tuple[int, ...]:
    """The levels (0: stride 4) of the maps Swin's backbone dict returns to the model."""
    import inspect
    out_indices = backbone.get('out_indices')
    if out_indices is None:
        params = inspect.signature(_swin_class(package, backbone)).parameters
        out_indices = params['out_indices'].default
    if isinstance(out_indices, int):
        out_indices = (out_indices, )
    count = len(swin_widths(package, backbone))
    return tuple(sorted(i + count if i < 0 else i for i in out_indices))


def _inner_types(cfg: dict) -> str:
    """'StandardRoIHead(bbox_head=Shared2FCBBoxHead, mask_head=FCNMaskHead)'."""
    inner = []
    for key, value in cfg.items():
        if not INNER_KEY.search(key):
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        types = sorted({short_type(v) for v in values if isinstance(v, dict) and 'type' in v})
        if types:
            inner.append(f'{key}={"/".join(types)}')
    return short_type(cfg) + (f'({", ".join(inner)})' if inner else '')


def necks_of(model: dict) -> List[dict]:
    neck = model.get('neck')
    return [] if neck is None else list(neck) if isinstance(neck, (list, tuple)) else [neck]


def heads_of(model: dict) -> Dict[str, List[dict]]:
    """{key: [head dicts]} of a model dict (an MMSeg auxiliary head may be a list)."""
    heads = {}
    for key, value in model.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        if HEAD_KEY.search(key) and values and all(isinstance(v, dict) for v in values):
            heads[key] = list(values)
    return heads


def structure(package: str, model: dict, optim_constructor: Optional[str] = None) -> str:
    """What a model is made of, as far as a backbone is concerned (one line)."""
    backbone = model.backbone
    necks = ' + '.join(short_type(neck) for neck in necks_of(model)) or 'no neck'
    heads = '; '.join(f'{key}: ' + ' / '.join(_inner_types(h) for h in values)
                      for key, values in sorted(heads_of(model).items()))
    line = (f'{package} {model.type}: Swin levels {list(swin_levels(package, backbone))} -> '
            f'{necks} -> {heads}')
    if backbone.get('in_channels', 3) != 3:
        line += f'; {backbone.in_channels}-channel images'
    if optim_constructor:
        line += f'; optimiser constructor {optim_constructor}'
    return line


@dataclass(eq=False)
class Group:
    """The Swin models of one structure; ``models[0]`` is the representative."""
    name: str  # short and unique: 'mmdet.MaskRCNN', 'mmdet.DINO.L1-3', 'mmseg.UPerHead.6ch'
    structure: str
    models: List[SwinModel]

    @property
    def representative(self) -> SwinModel:
        return self.models[0]

    @property
    def neck_kinds(self) -> Tuple[str, ...]:
        """The type of the neck that takes the backbone's maps (the first), or :data:`NO_NECK`;
        a later neck (DyHead after FPN) takes the first one's maps, whatever the backbone."""
        necks = necks_of(self.representative.model)
        return (short_type(necks[0]) if necks else NO_NECK, )

    @property
    def head_kinds(self) -> Tuple[str, ...]:
        """What the heads are (:data:`HEAD_KINDS`; an unlisted type is its own kind)."""
        types = [short_type(h) for values in heads_of(self.representative.model).values()
                 for h in values]
        return tuple(sorted({HEAD_KINDS.get(t, t) for t in types}))

    def fault(self) -> Optional[str]:
        """The packaged config's own fault (:func:`config_fault`), or None."""
        return config_fault(self.representative)

    def missing(self) -> Optional[str]:
        """What the model takes from Swin that our backbones cannot give, or None."""
        model = self.representative
        levels = swin_levels(model.package, model.model.backbone)
        if max(levels) > 3:
            strides = ', '.join(str(4 * 2**level) for level in levels if level > 3)
            return (f'Swin level(s) {[lv for lv in levels if lv > 3]} (stride {strides}): a fifth '
                    f'backbone stage; ours end at level 3 (stride 32)')
        return None


def _group_name(package: str, model: dict) -> str:
    what = short_type(model.decode_head) if model.type == 'EncoderDecoder' else model.type
    return f'{package}.{what}'


def _features(member: SwinModel) -> Tuple[str, str, str]:
    """What can tell two structures of one name apart: levels, image channels, constructor."""
    levels = swin_levels(member.package, member.model.backbone)
    channels = member.model.backbone.get('in_channels', 3)
    return (f'L{min(levels)}-{max(levels)}', '' if channels == 3 else f'{channels}ch',
            member.optim_constructor or '')


def _representative_order(model: SwinModel):
    backbone = model.model.backbone
    depths = backbone.get('depths') or [0]
    return (sum(swin_widths(model.package, backbone)), sum(depths), model.path)


def group_models(models: Sequence[SwinModel]) -> List[Group]:
    """The models grouped by :func:`structure`, groups sorted by name. Where structures share a
    name, each gets the features that differ among them ('.L1-3' for the Swin levels, '.6ch' for
    the image channels, the optimiser constructor's name), and a number if that is not enough."""
    by_structure: Dict[str, List[SwinModel]] = {}
    for model in models:
        key = structure(model.package, model.model, model.optim_constructor)
        by_structure.setdefault(key, []).append(model)
    by_name: Dict[str, List[str]] = {}
    for key, members in by_structure.items():
        by_name.setdefault(_group_name(members[0].package, members[0].model), []).append(key)
    groups = []
    for name, keys in by_name.items():
        features = {key: _features(by_structure[key][0]) for key in keys}
        differ = [i for i in range(3) if len({f[i] for f in features.values()}) > 1]
        for index, key in enumerate(sorted(keys)):
            suffix = [features[key][i] for i in differ if features[key][i]]
            if sum(1 for f in features.values() if [f[i] for i in differ] ==
                   [features[key][i] for i in differ]) > 1:
                suffix.append(str(index + 1))
            members = sorted(by_structure[key], key=_representative_order)
            groups.append(Group('.'.join([name, *suffix]), key, members))
    return sorted(groups, key=lambda group: group.name)


def kinds(groups: Sequence[Group]) -> Dict[str, List[Group]]:
    """{'neck: FPN': [groups], 'head: DETR': [groups], ...} over the groups our backbones can
    serve and whose configs build (``missing()`` and ``fault()`` are None)."""
    table: Dict[str, List[Group]] = {}
    for group in groups:
        if group.missing() or group.fault():
            continue
        for kind in group.neck_kinds:
            table.setdefault(f'neck: {kind}', []).append(group)
        for kind in group.head_kinds:
            table.setdefault(f'head: {kind}', []).append(group)
    return table


def rotation(groups: Sequence[Group], families: Sequence[str]) -> List[Tuple[Group, str]]:
    """(group, family) runs: every group once with the families in turn (in the groups' order),
    then, for each kind of neck and head (:func:`kinds`; those of fewer groups first, then by
    name) and each family that has not met it, one more run of that kind's group that has had
    the fewest runs (ties: the one that stands for the most configs, then by name) and not that
    family. Deterministic: the same groups give the same runs."""
    runs = [(group, families[index % len(families)]) for index, group in enumerate(groups)]
    for kind, members in sorted(kinds(groups).items(), key=lambda item: (len(item[1]), item[0])):
        for family in families:
            if any(g in members and f == family for g, f in runs):
                continue
            counts = {g.name: sum(1 for r, _ in runs if r is g) for g in members}
            choice = min((g for g in members if (g, family) not in runs),
                         key=lambda g: (counts[g.name], -len(g.models), g.name))
            runs.append((choice, family))
    return runs


def config_fault(model: SwinModel) -> Optional[str]:
    """What the packaged config gives a neck or head that its module does not take (an argument
    of code outside the package), or None: the model fails to build whatever the backbone."""
    import inspect
    registry = importlib.import_module(f'{model.package}.registry').MODELS
    parts = necks_of(model.model) + [h for hs in heads_of(model.model).values() for h in hs]
    for part in parts:
        cls = registry.get(part['type'])
        if cls is None:
            return f'{short_type(part)} is not a module of {model.package}'
        params = inspect.signature(cls).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            continue
        unknown = sorted(set(part) - set(params) - {'type', '_scope_'})
        if unknown:
            return f'{short_type(part)} does not take {", ".join(unknown)} (given by the config)'
    return None
