"""Convert an official HAT-Net checkpoint into an MMPretrain classifier checkpoint for mmhvit.

    python tools/model_converters/hatnet2mmhvit.py SRC DST   # = mmhvit convert hatnet SRC DST

SRC: an official ``HAT-Net_{Tiny,Small,Medium,Large}.pth`` (yun-liu/HAT-Net releases, v2.0), a
bare state dict or ``{'model': ...}``. DST (``state_dict`` with ``backbone.*`` and ``head.fc.*``,
plain ``meta``) loads into ``configs/hatnet_s_in1k.py`` and reproduces the official logits; for
the other archs set ``model.backbone.arch`` and ``model.head.in_channels`` (printed). The unused
``attn.proj_norm`` tensors are left out; a TransCNN checkpoint is refused.
SRC may be an ``http(s)://`` URL: it is downloaded once into the torch hub cache (a
``-<sha256 prefix>`` in its name is checked) and read weights-only, like a path. The work is
done by :mod:`mmhvit.models.converters`.
"""
import sys

from mmhvit.cli import main

if __name__ == '__main__':
    main(['convert', 'hatnet', *sys.argv[1:]])
