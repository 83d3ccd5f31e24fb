"""What the tests compare against, importable (as ``mmdet.testing`` is for MMDetection).

- :mod:`.archs`: the families by name (``FAMILIES``) and the one set of tiny archs
  (``TINY_ARCHS``: backbone kwargs per family; :func:`build_tiny`).
- :mod:`.hmhsa_reference`: TransCNN's and HAT-Net's official computation restated (layouts,
  forwards, the H-MHSA of both) and :class:`OfficialTransCNN` / :class:`OfficialHATNet`, the
  benchmark's reference modules.
- :mod:`.ptnt_reference`: PyramidTNT's official computation restated.
- :mod:`.timm_models`: timm's NesT and TNT (those families' references) for one of our archs.
- :mod:`.state_dicts`: official-layout state dicts (key lists, random weights) and the checkpoint
  files official training scripts write (DeiT's ``main.py``), a code-running pickle.
- :mod:`.checks`: ``assert_close``, ``poison_padding``.
- :mod:`.batches`: a synthetic two-image batch for an MMDet / MMSeg / MMPretrain model's step.

The models never import this package; timm (a test requirement) only where a function needs it.
"""
from .archs import FAMILIES, TINY_ARCHS, build_tiny, tiny_arch
from .batches import make_batch
from .checks import assert_close, poison_padding
from .hmhsa_reference import (
    OfficialHATNet,
    OfficialTransCNN,
    hatnet_forward,
    hatnet_shapes,
    transcnn_forward,
    transcnn_shapes,
)
from .ptnt_reference import ptnt_bias, ptnt_forward, ptnt_shapes, random_ptnt_state_dict
from .state_dicts import (
    CodeRunner,
    deit_checkpoint,
    meta_state_dict,
    random_state_dict,
    read_key_list,
    shifted,
)
from .timm_models import timm_nest, timm_tnt

__all__ = [
    'FAMILIES', 'TINY_ARCHS', 'build_tiny', 'tiny_arch', 'make_batch', 'assert_close',
    'poison_padding', 'OfficialTransCNN',
    'OfficialHATNet', 'hatnet_forward', 'hatnet_shapes', 'transcnn_forward', 'transcnn_shapes',
    'ptnt_bias', 'ptnt_forward', 'ptnt_shapes', 'random_ptnt_state_dict', 'CodeRunner',
    'deit_checkpoint', 'meta_state_dict', 'random_state_dict', 'read_key_list', 'shifted',
    'timm_nest', 'timm_tnt'
]
