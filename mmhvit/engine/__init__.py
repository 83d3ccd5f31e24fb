"""Training-engine pieces that make long runs safe: exact mid-epoch resume, AMP on any device,
``compile=True`` with an eager optimizer step, layer-wise learning-rate decay.

They register in MMEngine's root registries under names no OpenMMLab library owns, so that a
config of any scope (mmdet, mmseg, mmpretrain) can name them with ``custom_imports``.
"""
from .compile import EagerOptimizerStepHook
from .layer_decay import LayerDecayOptimWrapperConstructor, backbone_layer_ids
from .loops import ResumableEpochBasedTrainLoop, RNGStateHook, get_rng_state, set_rng_state
from .optim_wrapper import AnyDeviceAmpOptimWrapper

__all__ = [
    'ResumableEpochBasedTrainLoop', 'RNGStateHook', 'get_rng_state', 'set_rng_state',
    'AnyDeviceAmpOptimWrapper', 'EagerOptimizerStepHook', 'LayerDecayOptimWrapperConstructor',
    'backbone_layer_ids'
]
