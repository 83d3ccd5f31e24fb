"""Loading checkpoints into the backbones: official layouts converted on the fly, every key accounted."""
from collections import OrderedDict
from typing import Dict, Optional

import torch
from mmengine.logging import print_log
from mmengine.runner.checkpoint import CheckpointLoader


def read_state_dict(filename: str) -> Dict[str, torch.Tensor]:
    """Read the tensors of a checkpoint file or URL (``.pth``, ``.pth.tar`` or ``.safetensors``).

    Unwraps the containers that training scripts write (``state_dict``, ``model``, ``state_dict_ema``
    is not taken: the plain weights win when both exist).
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
    """Keep the keys under ``prefix`` (e.g. ``backbone.``), without it, as mmengine's Pretrained does."""
    if not prefix:
        return state_dict
    if not prefix.endswith('.'):
        prefix += '.'
    picked = OrderedDict((k[len(prefix):], v) for k, v in state_dict.items() if k.startswith(prefix))
    if not picked:
        raise KeyError(f'no key of checkpoint {filename} starts with prefix "{prefix}"')
    return picked


def load_converted_state_dict(model: torch.nn.Module, state_dict: Dict[str, torch.Tensor],
                              source: str = 'checkpoint') -> None:
    """Load an already converted state dict non-strictly, after checking that it fits the model.

    Every shape mismatch is collected first; when there is any, the model's ``describe_checkpoint``
    names the architecture that the checkpoint was made for, and loading fails with one error naming
    both archs. Missing and unexpected keys are logged, never dropped silently.
    """
    own = model.state_dict()
    mismatched = [
        f'{key}: checkpoint {tuple(value.shape)} vs model {tuple(own[key].shape)}'
        for key, value in state_dict.items()
        if key in own and value.shape != own[key].shape and not model.is_resizable_key(key)
    ]
    if mismatched:
        raise ValueError(
            f'{source} was made for {type(model).__name__} arch '
            f'{model.describe_checkpoint(state_dict)}, but this model is arch {model.arch_name}; '
            f'{len(mismatched)} tensors differ in shape, e.g. ' + '; '.join(mismatched[:3]))
    result = model.load_state_dict(state_dict, strict=False)
    if result.missing_keys:
        print_log(f'{source}: {len(result.missing_keys)} missing keys (left at their initial '
                  f'values): {result.missing_keys}', logger='current', level=30)
    if result.unexpected_keys:
        print_log(f'{source}: {len(result.unexpected_keys)} unexpected keys (ignored): '
                  f'{result.unexpected_keys}', logger='current', level=30)
    if not result.missing_keys and not result.unexpected_keys:
        print_log(f'{source}: all {len(state_dict)} tensors loaded', logger='current')


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
