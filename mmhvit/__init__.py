"""mmhvit: nested / hierarchical vision transformers as OpenMMLab backbones.

Importing the package registers every backbone in ``mmhvit.registry.MODELS``. It imports torch,
mmengine and mmcv only: never mmdet, mmseg or mmpretrain.
"""
from . import (
    engine,  # noqa: F401  (registers the resumable loop, its hook, CPU AMP)
    models,  # noqa: F401  (registers the backbones)
)
from .version import __version__

__all__ = ['__version__']
