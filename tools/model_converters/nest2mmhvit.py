"""Convert a timm NesT checkpoint into an MMPretrain classifier checkpoint for mmhvit.

    python tools/model_converters/nest2mmhvit.py SRC DST [--num-heads H1 H2 H3]
    # = mmhvit convert nest SRC DST [--num-heads H1 H2 H3]

SRC: a timm ``nest_{tiny,small,base}_jx`` (official JAX weights) or ``nest_*`` state dict, ``.pth``
or ``.safetensors``. DST loads into ``configs/nest_t_in1k.py`` (other archs: set
``model.backbone.arch`` and ``model.head.in_channels``; timm's non-jx ``nest_*`` also need
``model.backbone.pool_padding='symmetric'``) and reproduces timm's logits.
``--num-heads`` is only needed for custom archs whose heads are not channels / 32.
SRC may be an ``http(s)://`` URL: it is downloaded once into the torch hub cache (a
``-<sha256 prefix>`` in its name is checked) and read weights-only, like a path. The work is
done by :mod:`mmhvit.models.converters`.
"""
import sys

from mmhvit.cli import main

if __name__ == '__main__':
    main(['convert', 'nest', *sys.argv[1:]])
