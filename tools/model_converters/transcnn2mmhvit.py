"""Convert an official TransCNN checkpoint into an MMPretrain classifier checkpoint for mmhvit.

    python tools/model_converters/transcnn2mmhvit.py SRC DST

SRC: an official ``TransCNN-{Tiny,Small,Medium,Large}.pth`` (yun-liu/TransCNN releases), a
bare state dict or ``{'model': ...}``. DST (``state_dict`` with ``backbone.*`` and ``head.fc.*``,
plain ``meta``) loads into ``configs/transcnn_b_in1k.py`` and reproduces the official logits; for
the other archs set ``model.backbone.arch`` and ``model.head.in_channels`` (printed below).
SRC may be an ``http(s)://`` URL: it is downloaded once into the torch hub cache (a
``-<sha256 prefix>`` in its name is checked) and read weights-only, like a path.
"""
import argparse

from mmhvit.models.backbones.transcnn import (
    convert_transcnn_checkpoint,
    describe_transcnn_checkpoint,
    is_official_transcnn,
)
from mmhvit.models.checkpoint import read_state_dict, save_converted_classifier


def convert(src: str, dst: str) -> dict:
    state_dict = read_state_dict(src)
    try:
        converted = convert_transcnn_checkpoint(state_dict, with_head=True)
    except ValueError as error:  # a HAT-Net checkpoint
        raise SystemExit(f'{src}: {error} (hatnet2mmhvit.py converts it)')
    if not is_official_transcnn(state_dict):
        raise SystemExit(f'{src} does not have the official TransCNN layout (patch_embed.0, '
                         f'blocks.*, ds2-4, classifier.1)')
    return save_converted_classifier(converted, src, dst, describe_transcnn_checkpoint(converted),
                                     'tools/model_converters/transcnn2mmhvit.py')


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='official TransCNN -> mmhvit/MMPretrain checkpoint')
    parser.add_argument('src', help='official TransCNN checkpoint (.pth); a path or an http(s) URL')
    parser.add_argument('dst', help='output .pth')
    args = parser.parse_args(argv)
    meta = convert(args.src, args.dst)
    print(f'{args.src} (TransCNN {meta["arch"]}) -> {args.dst}; config: configs/transcnn_b_in1k.py '
          f'with model.backbone.arch={meta["arch"]!r}, '
          f'model.head.in_channels={meta["head_in_channels"]}')


if __name__ == '__main__':
    main()
