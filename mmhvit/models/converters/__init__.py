"""Other people's checkpoint layouts -> our keys, one module per family, as pure functions.

Each family module has its key tables and ``convert_<family>_checkpoint`` (state dict in, our
keys out) and ``describe_*_checkpoint`` (the arch a converted state dict was made for); the
backbones call them from their ``convert_checkpoint`` / ``describe_checkpoint`` hooks.
:mod:`.files` converts whole files (``mmhvit convert FAMILY SRC DST``).
"""
from .hatnet import convert_hatnet_checkpoint, is_official_hatnet
from .hmhsa import (
    check_hmhsa_release,
    describe_hmhsa_checkpoint,
    hmhsa_release,
    is_official_hmhsa_layout,
)
from .nest import convert_nest_checkpoint, describe_nest_checkpoint
from .ptnt import convert_ptnt_checkpoint, describe_ptnt_checkpoint, detect_ptnt_layout
from .tnt import convert_tnt_checkpoint, describe_tnt_checkpoint, detect_tnt_layout
from .transcnn import convert_transcnn_checkpoint

__all__ = [
    'convert_hatnet_checkpoint', 'is_official_hatnet', 'check_hmhsa_release',
    'describe_hmhsa_checkpoint', 'hmhsa_release', 'is_official_hmhsa_layout',
    'convert_nest_checkpoint', 'describe_nest_checkpoint', 'convert_ptnt_checkpoint',
    'describe_ptnt_checkpoint', 'detect_ptnt_layout', 'convert_tnt_checkpoint',
    'describe_tnt_checkpoint', 'detect_tnt_layout', 'convert_transcnn_checkpoint'
]
