"""Convert a TNT checkpoint into an MMPretrain classifier checkpoint for mmhvit.

    python tools/model_converters/tnt2mmhvit.py SRC DST

SRC: an official TNT checkpoint (``tnt_s_81.5.pth.tar``, ``tnt_b_82.9.pth.tar``), a timm TNT state
dict (``.pth`` or ``.safetensors``) or an mmpretrain TNT checkpoint. DST loads into
``configs/tnt_s_in1k.py`` (other archs: set ``model.backbone.arch`` and ``model.head.in_channels``;
legacy-layout weights: ``model.backbone.legacy=True``) and reproduces the source model's logits.
SRC may be an ``http(s)://`` URL: it is downloaded once into the torch hub cache (a
``-<sha256 prefix>`` in its name is checked) and read weights-only, like a path.
"""
import argparse
from collections import OrderedDict

from mmhvit.models.backbones.tnt import (
    convert_tnt_checkpoint,
    describe_tnt_checkpoint,
    detect_tnt_layout,
)
from mmhvit.models.checkpoint import read_state_dict, save_converted_classifier


def convert(src: str, dst: str) -> dict:
    state_dict = read_state_dict(src)
    layout = detect_tnt_layout(
        OrderedDict((k[len('backbone.'):], v) for k, v in state_dict.items()
                    if k.startswith('backbone.')) or state_dict)
    converted = convert_tnt_checkpoint(state_dict)
    arch = describe_tnt_checkpoint(converted)
    return save_converted_classifier(converted, src, dst, arch,
                                     'tools/model_converters/tnt2mmhvit.py',
                                     source_layout=layout, legacy='legacy' in arch)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='official/timm/mmpretrain TNT -> mmhvit/MMPretrain checkpoint')
    parser.add_argument('src', help='TNT checkpoint (.pth, .pth.tar or .safetensors), '
                        'a path or an http(s) URL')
    parser.add_argument('dst', help='output .pth')
    args = parser.parse_args(argv)
    meta = convert(args.src, args.dst)
    note = ' (build the backbone with legacy=True)' if meta['legacy'] else ''
    print(f'{args.src} ({meta["source_layout"]} layout, TNT {meta["arch"]}) -> {args.dst}{note}')


if __name__ == '__main__':
    main()
