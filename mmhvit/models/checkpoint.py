"""Reading checkpoints (any container, any wrapper) and writing classifier checkpoints."""
from collections import OrderedDict
from typing import Dict, Optional

import torch
from mmengine.runner.checkpoint import CheckpointLoader


def read_state_dict(filename: str) -> Dict[str, torch.Tensor]:
    """Read the tensors of a checkpoint file or URL (``.pth``, ``.pth.tar`` or ``.safetensors``).

    Unwraps the containers that training scripts write (``state_dict``, ``model``;
    ``state_dict_ema`` is not taken: the plain weights win when both exist).
    """
    if str(filename).endswith('.safetensors'):
        from safetensors.torch import load_file
        return OrderedDict(load_file(filename, device='cpu'))
    checkpoint = CheckpointLoader.load_checkpoint(filename, map_location='cpu')
    for container in ('state_dict', 'model'):
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(container), dict):
            checkpoint = checkpoint[container]
            break
    if not isinstance(checkpoint, dict):
        raise TypeError(f'{filename} holds a {type(checkpoint).__name__}, not a state dict')
    return OrderedDict((k, v) for k, v in checkpoint.items() if isinstance(v, torch.Tensor))


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
