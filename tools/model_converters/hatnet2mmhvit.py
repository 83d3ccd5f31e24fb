"""Convert an official HAT-Net checkpoint into an MMPretrain classifier checkpoint for mmhvit.

    python tools/model_converters/hatnet2mmhvit.py SRC DST

SRC: an official ``HAT-Net_{Tiny,Small,Medium,Large}.pth`` (yun-liu/HAT-Net releases, v2.0), a
bare state dict or ``{'model': ...}``. DST (``state_dict`` with ``backbone.*`` and ``head.fc.*``,
plain ``meta``) loads into ``configs/hatnet_s_in1k.py`` and reproduces the official logits; for
the other archs set ``model.backbone.arch`` and ``model.head.in_channels`` (printed below). The
unused ``attn.proj_norm`` tensors are left out. A TransCNN checkpoint is refused (use
transcnn2mmhvit.py).
SRC may be an ``http(s)://`` URL: it is downloaded once into the torch hub cache (a
``-<sha256 prefix>`` in its name is checked) and read weights-only, like a path.
"""
import argparse

from mmhvit.models.backbones.hatnet import (
    convert_hatnet_checkpoint,
    describe_hatnet_checkpoint,
    is_official_hatnet,
)
from mmhvit.models.checkpoint import read_state_dict, save_converted_classifier


def convert(src: str, dst: str) -> dict:
    state_dict = read_state_dict(src)
    try:
        converted = convert_hatnet_checkpoint(state_dict, with_head=True)
    except ValueError as error:
        raise SystemExit(f'{src}: {error}')
    if not is_official_hatnet(state_dict):
        raise SystemExit(f'{src} does not have the official HAT-Net layout (patch_embed.0, '
                         f'blocks.*, ds2-4, classifier.1, GroupNorms)')
    return save_converted_classifier(converted, src, dst, describe_hatnet_checkpoint(converted),
                                     'tools/model_converters/hatnet2mmhvit.py')


def main(argv=None):
    parser = argparse.ArgumentParser(description='official HAT-Net -> mmhvit/MMPretrain checkpoint')
    parser.add_argument('src', help='official HAT-Net checkpoint (.pth); a path or an http(s) URL')
    parser.add_argument('dst', help='output .pth')
    args = parser.parse_args(argv)
    meta = convert(args.src, args.dst)
    print(f'{args.src} (HAT-Net {meta["arch"]}) -> {args.dst}; config: configs/hatnet_s_in1k.py '
          f'with model.backbone.arch={meta["arch"]!r}, '
          f'model.head.in_channels={meta["head_in_channels"]}')


if __name__ == '__main__':
    main()
