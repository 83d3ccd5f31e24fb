"""Reading checkpoints safely (any container, any wrapper) and writing classifier checkpoints.

Nothing here unpickles arbitrary objects: ``.pth`` files load with ``torch.load(weights_only=True)``
(tensors, numbers, strings, containers), ``.safetensors`` files hold tensors only, and MMEngine's
own training checkpoints add exactly the few MMEngine/numpy types that their logs pickle
(:func:`training_checkpoint_globals`). A file that would run code when unpickled is refused.
"""
import contextlib
import os.path as osp
import pickle
import zipfile
from collections import OrderedDict
from typing import Dict, Optional

import numpy as np
import torch
from mmengine.runner.checkpoint import CheckpointLoader

CHECKPOINT_EXPECTED = ('a PyTorch checkpoint (.pth/.pth.tar written by torch.save, holding a state '
                       'dict) or a .safetensors file')


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
    return [HistoryBuffer, (_history_buffer_getattr, 'builtins.getattr'), bytes, np.dtype,
            np.ndarray, _reconstruct, scalar, *dtype_classes]


@contextlib.contextmanager
def training_checkpoint_globals():
    """Let ``torch.load(weights_only=True)`` read MMEngine training checkpoints (resume, test).

    Their message hub pickles ``HistoryBuffer`` objects and numpy arrays; only these types (and a
    ``getattr`` limited to HistoryBuffer's statistics) are added to the weights-only allowlist.
    """
    with torch.serialization.safe_globals(_training_checkpoint_types()):
        yield


def load_checkpoint_file(filename: str, map_location='cpu'):
    """``torch.load`` a local checkpoint weights-only (or a URL through MMEngine, which uses torch's
    weights-only default), with one clear error per kind of bad file."""
    filename = str(filename)
    if '://' in filename:
        return CheckpointLoader.load_checkpoint(filename, map_location=map_location)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'checkpoint {filename} does not exist; expected '
                                f'{CHECKPOINT_EXPECTED}')
    if osp.getsize(filename) == 0:
        raise ValueError(f'checkpoint {filename} is empty (0 bytes); expected '
                         f'{CHECKPOINT_EXPECTED}')
    with open(filename, 'rb') as f:
        head = f.read(4)
    # torch.save writes a zip archive; its legacy format is a pickle, which starts with PROTO.
    if not head.startswith(b'PK\x03\x04') and not head.startswith(b'\x80'):
        raise ValueError(f'{filename} is not a checkpoint (neither the zip archive that torch.save '
                         f'writes nor a pickle); expected {CHECKPOINT_EXPECTED}')
    try:
        with training_checkpoint_globals():
            return torch.load(filename, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if 'Weights only load failed' in str(error) or 'refused' in str(error):
            raise pickle.UnpicklingError(
                f'refused to load checkpoint {filename}: it pickles Python objects that are not '
                'weights (loading them could run code). Expected tensors in plain containers; '
                'convert a trusted file with tools/model_converters/publish_model.py. Detail: ' +
                str(error).splitlines()[0]) from None
        raise ValueError(f'checkpoint {filename} is not readable ({error}); expected '
                         f'{CHECKPOINT_EXPECTED}') from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, KeyError, ValueError,
            IndexError, TypeError) as error:
        detail = str(error).splitlines()[0] if str(error) else ''
        raise ValueError(f'checkpoint {filename} is corrupt or truncated, or not a checkpoint '
                         f'({type(error).__name__}: {detail}); expected {CHECKPOINT_EXPECTED}'
                         ) from None


def read_state_dict(filename: str) -> Dict[str, torch.Tensor]:
    """Read the tensors of a checkpoint file or URL (``.pth``, ``.pth.tar`` or ``.safetensors``).

    Unwraps the containers that training scripts write (``state_dict``, ``model``;
    ``state_dict_ema`` is not taken: the plain weights win when both exist).
    """
    if str(filename).endswith('.safetensors'):
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        if not osp.isfile(filename):
            raise FileNotFoundError(f'checkpoint {filename} does not exist; expected '
                                    f'{CHECKPOINT_EXPECTED}')
        try:
            return OrderedDict(load_file(filename, device='cpu'))
        except (SafetensorError, OSError) as error:
            raise ValueError(f'checkpoint {filename} is not a valid .safetensors file ({error}); '
                             f'expected {CHECKPOINT_EXPECTED}') from None
    checkpoint = load_checkpoint_file(filename)
    for container in ('state_dict', 'model'):
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(container), dict):
            checkpoint = checkpoint[container]
            break
    if not isinstance(checkpoint, dict):
        raise TypeError(f'checkpoint {filename} holds a {type(checkpoint).__name__}, not a state '
                        f'dict; expected {CHECKPOINT_EXPECTED}')
    state_dict = OrderedDict((k, v) for k, v in checkpoint.items() if isinstance(v, torch.Tensor))
    if not state_dict:
        raise ValueError(f'checkpoint {filename} holds no tensors (keys: {list(checkpoint)[:8]}); '
                         f'expected {CHECKPOINT_EXPECTED}')
    return state_dict


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
    if state_dict and all(k.startswith('module.') for k in state_dict):
        state_dict = OrderedDict((k[len('module.'):], v) for k, v in state_dict.items())
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
    converter records (source file, arch, converter, the head's size when there is one)."""
    meta = dict(source=osp.basename(src), arch=arch, converter=converter, **extra)
    head = converted.get('head.fc.weight', converted.get('head.weight'))
    if head is not None:
        meta.update(head_in_channels=int(head.shape[1]), num_classes=int(head.shape[0]))
    save_classifier_checkpoint(converted, dst, meta)
    return meta
