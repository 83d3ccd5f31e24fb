"""Convert a TNT checkpoint into an MMPretrain classifier checkpoint for mmhvit.

    python tools/model_converters/tnt2mmhvit.py SRC DST   # = mmhvit convert tnt SRC DST

SRC: an official TNT checkpoint (``tnt_s_81.5.pth.tar``, ``tnt_b_82.9.pth.tar``), a timm TNT state
dict (``.pth`` or ``.safetensors``) or an mmpretrain TNT checkpoint. DST loads into
``configs/tnt_s_in1k.py`` (other archs: set ``model.backbone.arch`` and ``model.head.in_channels``;
legacy-layout weights: ``model.backbone.legacy=True``) and reproduces the source model's logits.
SRC may be an ``http(s)://`` URL: it is downloaded once into the torch hub cache (a
``-<sha256 prefix>`` in its name is checked) and read weights-only, like a path. The work is
done by :mod:`mmhvit.models.converters`.
"""
import sys

from mmhvit.cli import main

if __name__ == '__main__':
    main(['convert', 'tnt', *sys.argv[1:]])
