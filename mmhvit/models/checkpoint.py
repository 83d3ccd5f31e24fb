"""Reading checkpoints safely (any container, any wrapper, path or URL) and writing classifier
checkpoints.

Nothing here unpickles arbitrary objects: ``.pth`` files load with ``torch.load(weights_only=True)``
(tensors, numbers, strings, containers), ``.safetensors`` files hold tensors only, and training
checkpoints add exactly the few harmless types that training scripts pickle
(:func:`training_checkpoint_globals`). A file that would run code when unpickled is refused. URLs
are downloaded into torch's hub cache first (:mod:`mmhvit.models.checkpoint_url`) and then read as
a local path; :func:`register_url_loaders` makes MMEngine's ``CheckpointLoader`` do the same.
"""
import argparse
import contextlib
import difflib
import logging
import os
import os.path as osp
import pickle
import re
import zipfile
from collections import OrderedDict
from typing import Dict, Optional, Tuple

import numpy as np
import torch
from mmengine.logging import print_log
from mmengine.runner import checkpoint as mmengine_checkpoint
from mmengine.runner.checkpoint import CheckpointLoader

from .checkpoint_url import URL_PREFIXES, download_checkpoint, is_url, url_file_name

CHECKPOINT_EXPECTED = ('a PyTorch checkpoint (.pth/.pth.tar written by torch.save, holding a state '
                       'dict) or a .safetensors file')
# Where training scripts keep the weights, in the order taken: the plain weights win over the EMA
# copy when both exist (DeiT / TransCNN / HAT-Net: model, model_ema; timm: state_dict,
# state_dict_ema); a file with only the EMA copy gives that.
WEIGHT_CONTAINERS = ('state_dict', 'model', 'state_dict_ema', 'model_ema')


def _history_buffer_getattr(obj, name):
    """``getattr`` as MMEngine's pickled HistoryBuffer needs it (its statistics methods), and
    nothing else: the real ``getattr`` would let a file reach any attribute."""
    from mmengine.logging.history_buffer import HistoryBuffer
    if obj is HistoryBuffer and name in ('min', 'max', 'mean', 'current'):
        return getattr(obj, name)
    raise pickle.UnpicklingError(f'refused getattr({obj!r}, {name!r}) while loading a checkpoint')


def _training_checkpoint_types() -> list:
    from mmengine.logging.history_buffer import HistoryBuffer
    try:
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct, scalar
    dtype_classes = [getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith('DType')]
    # argparse.Namespace: the `args` of the official (DeiT / PVT / timm) training scripts; it is
    # rebuilt from a dict of values that pass the same allowlist (as timm's own loader allows it).
    return [HistoryBuffer, (_history_buffer_getattr, 'builtins.getattr'), bytes, np.dtype,
            np.ndarray, _reconstruct, scalar, *dtype_classes, argparse.Namespace]


@contextlib.contextmanager
def training_checkpoint_globals():
    """Let ``torch.load(weights_only=True)`` read training checkpoints (resume, test, pretrained).

    MMEngine's message hub pickles ``HistoryBuffer`` objects and numpy arrays; the official
    training scripts (DeiT, PVT, timm) pickle their ``args`` as an ``argparse.Namespace``. Only
    these types (and a ``getattr`` limited to HistoryBuffer's statistics) are added to the
    weights-only allowlist, by name.
    """
    with torch.serialization.safe_globals(_training_checkpoint_types()):
        yield


def _local_copy(filename: str) -> Tuple[str, str]:
    """``(local path, name for messages)``: a URL is downloaded into the hub cache first."""
    filename = str(filename)
    if is_url(filename):
        path = download_checkpoint(filename)
        return path, f'{filename} (cached as {path})'
    return filename, filename


def _refusal_detail(error: Exception) -> str:
    """The line of torch's refusal that names the refused global (colour codes removed)."""
    text = re.sub(r'\x1b\[[0-9;]*m', '', str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    culprit = [line for line in lines if 'GLOBAL' in line or 'global' in line]
    return 'Weights only load failed: ' + (culprit or lines or [''])[0]


def load_checkpoint_file(filename: str, map_location='cpu'):
    """``torch.load`` a checkpoint path or ``http(s)://`` URL weights-only.

    The training scripts' harmless types are allowed (:func:`training_checkpoint_globals`), and
    each kind of bad file gets one clear error. A URL is downloaded into the hub cache first
    (:func:`~mmhvit.models.checkpoint_url.download_checkpoint`), then read like a path.

    Args:
        filename: a local path, an ``http(s)://`` URL, or another MMEngine scheme (``s3://``...).
        map_location: as for :func:`torch.load`.

    Returns:
        The loaded object (a state dict, or the dict a training script saved).
    """
    path, source = _local_copy(filename)
    if '://' in path:  # other MMEngine schemes (s3://, ...): its loaders, torch's default
        with training_checkpoint_globals():  # weights_only=True
            return CheckpointLoader.load_checkpoint(path, map_location=map_location)
    return _load_local(path, source, map_location)


def _load_local(filename: str, source: str, map_location='cpu'):
    if not osp.isfile(filename):
        raise FileNotFoundError(f'checkpoint {source} does not exist; expected '
                                f'{CHECKPOINT_EXPECTED}')
    if osp.getsize(filename) == 0:
        raise ValueError(f'checkpoint {source} is empty (0 bytes); expected '
                         f'{CHECKPOINT_EXPECTED}')
    with open(filename, 'rb') as f:
        head = f.read(4)
    # torch.save writes a zip archive; its legacy format is a pickle, which starts with PROTO.
    if not head.startswith(b'PK\x03\x04') and not head.startswith(b'\x80'):
        raise ValueError(f'{source} is not a checkpoint (neither the zip archive that torch.save '
                         f'writes nor a pickle); expected {CHECKPOINT_EXPECTED}')
    try:
        with training_checkpoint_globals():
            return torch.load(filename, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if 'Weights only load failed' in str(error) or 'refused' in str(error):
            raise pickle.UnpicklingError(
                f'refused to load checkpoint {source}: it pickles Python objects that are not '
                'weights (loading them could run code). Expected tensors in plain containers; '
                'if you trust its source, re-save only its tensors (torch.load with '
                'weights_only=False, then torch.save of the state dict). Detail: ' +
                _refusal_detail(error)) from None
        raise ValueError(f'checkpoint {source} is not readable ({error}); expected '
                         f'{CHECKPOINT_EXPECTED}') from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, KeyError, ValueError,
            IndexError, TypeError) as error:
        detail = str(error).splitlines()[0] if str(error) else ''
        raise ValueError(f'checkpoint {source} is corrupt or truncated, or not a checkpoint '
                         f'({type(error).__name__}: {detail}); expected {CHECKPOINT_EXPECTED}'
                         ) from None


def state_dict_of(checkpoint, source: str = 'checkpoint') -> Dict[str, torch.Tensor]:
    """The tensors of a loaded checkpoint, wherever its training script put them.

    Takes the first of ``WEIGHT_CONTAINERS`` that holds a dict (the EMA copy only when there are
    no plain weights, with a warning), or the checkpoint itself; drops non-tensor entries and a
    DataParallel ``module.`` prefix on every key.

    Args:
        checkpoint: what :func:`load_checkpoint_file` returned.
        source: the file's name, for error messages.

    Raises:
        TypeError: the checkpoint is not a dict.
        ValueError: it holds no tensors.
    """
    if not isinstance(checkpoint, dict):
        raise TypeError(f'checkpoint {source} holds a {type(checkpoint).__name__}, not a state '
                        f'dict; expected {CHECKPOINT_EXPECTED}')
    weights = checkpoint
    for container in WEIGHT_CONTAINERS:
        if isinstance(checkpoint.get(container), dict):
            if container.endswith('_ema'):
                print_log(f'{source}: no plain weights, taking the EMA weights ({container})',
                          logger='current', level=logging.WARNING)
            weights = checkpoint[container]
            break
    state_dict = OrderedDict((k, v) for k, v in weights.items() if isinstance(v, torch.Tensor))
    if not state_dict:
        raise ValueError(f'checkpoint {source} holds no tensors (keys: {list(weights)[:8]}); '
                         f'expected {CHECKPOINT_EXPECTED}')
    return strip_module_prefix(state_dict)


def read_state_dict(filename: str) -> Dict[str, torch.Tensor]:
    """Read the tensors of a checkpoint path or URL (``.pth``, ``.pth.tar`` or ``.safetensors``).

    Unwraps the containers that training scripts write (:func:`state_dict_of`: ``state_dict``,
    ``model``, the EMA copy only when there are no plain weights) and a DataParallel ``module.``
    prefix on every key.
    """
    path, source = _local_copy(filename)
    if path.endswith('.safetensors'):
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        if not osp.isfile(path):
            raise FileNotFoundError(f'checkpoint {source} does not exist; expected '
                                    f'{CHECKPOINT_EXPECTED}')
        try:
            return strip_module_prefix(OrderedDict(load_file(path, device='cpu')))
        except (SafetensorError, OSError) as error:
            raise ValueError(f'checkpoint {source} is not a valid .safetensors file ({error}); '
                             f'expected {CHECKPOINT_EXPECTED}') from None
    return state_dict_of(_load_local(path, source), source)


def strip_module_prefix(state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Drop the ``module.`` that (Distributed)DataParallel puts before every key, if it is there."""
    if state_dict and all(k.startswith('module.') for k in state_dict):
        return OrderedDict((k[len('module.'):], v) for k, v in state_dict.items())
    return state_dict


def load_from_http_weights_only(filename: str, map_location=None, model_dir: Optional[str] = None,
                                progress: Optional[bool] = None):
    """MMEngine's ``load_from_http``, downloading into the hub cache and reading weights-only.

    Same arguments as ``mmengine.runner.checkpoint.load_from_http``; registered for ``http://``
    and ``https://`` by :func:`register_url_loaders`.
    """
    path = download_checkpoint(filename, model_dir=model_dir, progress=progress)
    return _load_local(path, f'{filename} (cached as {path})', map_location)


def _model_url(name: str, urls: Dict[str, str], scheme: str) -> str:
    """The URL (or, for open-mmlab://, possibly a path) MMEngine's index gives ``name``."""
    if name not in urls:
        close = difflib.get_close_matches(name, urls, n=3)
        hint = f' Did you mean {", ".join(scheme + n for n in close)}?' if close else ''
        raise ValueError(f'{scheme}{name}: MMEngine has no model of that name (its {scheme} '
                         f'index names {len(urls)}).{hint}')
    return urls[name]


def load_from_torchvision_weights_only(filename: str, map_location=None):
    """MMEngine's ``torchvision://NAME`` (and deprecated ``modelzoo://NAME``), read weights-only.

    The name is resolved with MMEngine's ``get_torchvision_models`` and the URL loaded by
    :func:`load_from_http_weights_only`.
    """
    scheme, name = filename.split('://', 1)
    if scheme == 'modelzoo':
        print_log('The URL scheme of "modelzoo://" is deprecated, please use "torchvision://" '
                  'instead', logger='current', level=logging.WARNING)
    urls = mmengine_checkpoint.get_torchvision_models()
    return load_from_http_weights_only(_model_url(name, urls, f'{scheme}://'),
                                       map_location=map_location)


def _mmengine_home() -> str:
    """MMEngine's cache folder (``$MMENGINE_HOME``, else ``$XDG_CACHE_HOME/mmengine``), where the
    open-mmlab:// index may name local files."""
    cache = os.getenv(mmengine_checkpoint.ENV_XDG_CACHE_HOME, mmengine_checkpoint.DEFAULT_CACHE_DIR)
    return osp.expanduser(os.getenv(mmengine_checkpoint.ENV_MMENGINE_HOME,
                                    osp.join(cache, 'mmengine')))


def load_from_openmmlab_weights_only(filename: str, map_location=None):
    """MMEngine's ``open-mmlab://NAME`` / ``openmmlab://NAME``, read weights-only.

    As MMEngine resolves them: a deprecated name is replaced by its successor (with a warning),
    then MMEngine's ``get_external_models`` gives a URL, loaded by
    :func:`load_from_http_weights_only`, or a path relative to MMEngine's cache folder, read like
    any local checkpoint.
    """
    scheme, name = filename.split('://', 1)
    prefix = f'{scheme}://'
    successors = mmengine_checkpoint.get_deprecated_model_names()
    if name in successors:
        print_log(f'{prefix}{name} is deprecated in favor of {prefix}{successors[name]}',
                  logger='current', level=logging.WARNING)
        name = successors[name]
    url = _model_url(name, mmengine_checkpoint.get_external_models(), prefix)
    if is_url(url):
        return load_from_http_weights_only(url, map_location=map_location)
    path = osp.join(_mmengine_home(), url)
    return _load_local(path, f'{prefix}{name} ({path})', map_location)


def load_from_mmcls_weights_only(filename: str, map_location=None):
    """MMEngine's ``mmcls://NAME``, read weights-only.

    As MMEngine's loader returns it: ``{'state_dict': ...}`` with the ``backbone.`` weights of the
    MMClassification checkpoint, without that prefix.
    """
    name = filename[len('mmcls://'):]
    url = _model_url(name, mmengine_checkpoint.get_mmcls_models(), 'mmcls://')
    checkpoint = load_from_http_weights_only(url, map_location=map_location)
    weights = checkpoint.get('state_dict', checkpoint) if isinstance(checkpoint, dict) else {}
    return dict(state_dict=OrderedDict((k[len('backbone.'):], v) for k, v in weights.items()
                                       if k.startswith('backbone.')))


# MMEngine's schemes that end in a download, and our weights-only loader of each. MMEngine's own
# loaders unpickle a download fully (torch's ``load_state_dict_from_url`` defaults to
# ``weights_only=False``).
WEIGHTS_ONLY_LOADERS = {
    **{prefix: load_from_http_weights_only for prefix in URL_PREFIXES},
    'torchvision://': load_from_torchvision_weights_only,
    'modelzoo://': load_from_torchvision_weights_only,
    'open-mmlab://': load_from_openmmlab_weights_only,
    'openmmlab://': load_from_openmmlab_weights_only,
    'mmcls://': load_from_mmcls_weights_only,
}


def register_url_loaders() -> None:
    """Make every checkpoint that MMEngine downloads load weights-only.

    Registers :data:`WEIGHTS_ONLY_LOADERS` with MMEngine's ``CheckpointLoader`` under MMEngine's
    own prefixes, replacing its loaders (``force=True``): the loader table holds one loader per
    prefix, so ours are the ones found. Called when mmhvit is imported, this covers the Runner's
    ``load_from`` and ``resume``, tools/test.py, the inferencers of the demo and the ``init_cfg``
    of any OpenMMLab model in the process. Nothing of MMEngine's module is replaced.
    """
    for prefix, loader in WEIGHTS_ONLY_LOADERS.items():
        CheckpointLoader.register_scheme(prefixes=prefix, loader=loader, force=True)


def strip_prefix(state_dict: Dict[str, torch.Tensor], prefix: Optional[str],
                 filename: str = '') -> Dict[str, torch.Tensor]:
    """Keep the keys under ``prefix`` (e.g. ``backbone.``), without it, as MMEngine's
    ``Pretrained`` does."""
    if not prefix:
        return state_dict
    if not prefix.endswith('.'):
        prefix += '.'
    picked = OrderedDict(
        (k[len(prefix):], v) for k, v in state_dict.items() if k.startswith(prefix))
    if not picked:
        raise KeyError(f'no key of checkpoint {filename} starts with prefix "{prefix}"')
    return picked


def unwrap_state_dict(state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """The backbone's tensors of a DDP-wrapped (``module.``) or MMPretrain-classifier
    (``backbone.``, with ``head.*`` beside it) state dict; any other passes unchanged."""
    state_dict = strip_module_prefix(state_dict)
    if any(k.startswith('backbone.') for k in state_dict):
        state_dict = OrderedDict((k[len('backbone.'):], v) for k, v in state_dict.items()
                                 if k.startswith('backbone.'))
    return state_dict


def save_classifier_checkpoint(state_dict: Dict[str, torch.Tensor], dst: str, meta: dict) -> None:
    """Write converted weights as an MMPretrain ``ImageClassifier`` checkpoint.

    Backbone keys get ``backbone.``; a linear head (``head.*`` or ``head.fc.*``) becomes the
    ``head.fc`` of a ``LinearClsHead``. Tensors are cloned so that no view drags its whole source
    storage into the file; ``meta`` must hold plain Python values (weights-only loadable).
    """
    classifier = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith('head.'):
            key = key if key.startswith('head.fc.') else 'head.fc.' + key[len('head.'):]
        elif not key.startswith('backbone.'):
            key = 'backbone.' + key
        classifier[key] = value.detach().clone().contiguous()
    torch.save(dict(state_dict=classifier, meta=meta), dst)


def save_converted_classifier(converted: Dict[str, torch.Tensor], src: str, dst: str,
                              arch: str, converter: str, **extra) -> dict:
    """Write a converter's output as an MMPretrain classifier checkpoint with the meta every
    converter records (source file and URL, arch, converter, the head's size when there is one)."""
    src = str(src)
    meta = dict(source=url_file_name(src) if is_url(src) else osp.basename(src), arch=arch,
                converter=converter, **extra)
    if is_url(src):
        meta['source_url'] = src
    head = converted.get('head.fc.weight', converted.get('head.weight'))
    if head is not None:
        meta.update(head_in_channels=int(head.shape[1]), num_classes=int(head.shape[0]))
    save_classifier_checkpoint(converted, dst, meta)
    return meta
