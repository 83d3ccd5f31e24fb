"""Convert an official PyramidTNT checkpoint into an MMPretrain classifier checkpoint for mmhvit.

    python tools/model_converters/ptnt2mmhvit.py SRC DST [--arch small]
    # = mmhvit convert ptnt SRC DST [--arch small]

SRC: an official PyramidTNT file (the BaiduDisk links of huawei-noah/Efficient-AI-Backbones
``tnt_pytorch/readme.md``: a plain state dict, ``.pth.tar``), or ``{'state_dict' | 'model': ...}``.
DST (``state_dict`` with ``backbone.*`` and ``head.fc.*``, plain ``meta``) loads into
``configs/ptnt_s_in1k.py`` and reproduces the official logits; for the other archs set
``model.backbone.arch`` and ``model.head.in_channels`` (printed; PyramidTNT-Ti was trained at 192,
so evaluate it with a 192 crop). A TNT checkpoint is refused, and with ``--arch`` a file of
another arch. SRC may be an ``http(s)://`` URL: it is downloaded once into the torch hub cache (a
``-<sha256 prefix>`` in its name is checked) and read weights-only, like a path. The work is
done by :mod:`mmhvit.models.converters`.
"""
import sys

from mmhvit.cli import main

if __name__ == '__main__':
    main(['convert', 'ptnt', *sys.argv[1:]])
