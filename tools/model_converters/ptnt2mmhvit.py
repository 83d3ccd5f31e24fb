"""Convert an official PyramidTNT checkpoint into an MMPretrain classifier checkpoint for mmhvit.

    python tools/model_converters/ptnt2mmhvit.py SRC DST [--arch small]

SRC: an official PyramidTNT file (the BaiduDisk links of huawei-noah/Efficient-AI-Backbones
``tnt_pytorch/readme.md``: a plain state dict, ``.pth.tar``), or ``{'state_dict' | 'model': ...}``.
DST (``state_dict`` with ``backbone.*`` and ``head.fc.*``, plain ``meta``) loads into
``configs/ptnt_s_in1k.py`` and reproduces the official logits; for the other archs set
``model.backbone.arch`` and ``model.head.in_channels`` (printed below; PyramidTNT-Ti was trained
at 192, so evaluate it with a 192 crop). A TNT checkpoint is refused (use tnt2mmhvit.py), and with
``--arch`` a file of another arch.
"""
import argparse

from mmhvit.models.backbones import PyramidTNT
from mmhvit.models.checkpoint import read_state_dict, save_converted_classifier
from mmhvit.models.converters import (
    convert_ptnt_checkpoint,
    describe_ptnt_checkpoint,
    detect_ptnt_layout,
)


def convert(src: str, dst: str, arch: str = None) -> dict:
    state_dict = read_state_dict(src)
    try:
        layout = detect_ptnt_layout(state_dict)
    except ValueError as error:
        raise SystemExit(f'{src}: {error}')
    if layout != 'official':
        raise SystemExit(f'{src} already has mmhvit\'s PyramidTNT keys: load it directly '
                         '(init_cfg Pretrained), it needs no conversion')
    converted = convert_ptnt_checkpoint(state_dict, with_head=True)
    described = describe_ptnt_checkpoint(converted, PyramidTNT)
    if arch is not None:
        wanted = {'ti': 'tiny', 's': 'small', 'm': 'medium', 'b': 'base'}.get(arch.lower(),
                                                                           arch.lower())
        if described != wanted:
            raise SystemExit(f'{src} is a PyramidTNT {described} checkpoint, not {wanted}')
    return save_converted_classifier(converted, src, dst, described,
                                     'tools/model_converters/ptnt2mmhvit.py',
                                     source_layout=layout)


def main(argv=None):
    parser = argparse.ArgumentParser(description='official PyramidTNT -> mmhvit/MMPretrain '
                                     'checkpoint')
    parser.add_argument('src', help='official PyramidTNT checkpoint (.pth.tar, .pth)')
    parser.add_argument('dst', help='output .pth')
    parser.add_argument('--arch', help='refuse a file of another arch (tiny, small, medium, base)')
    args = parser.parse_args(argv)
    meta = convert(args.src, args.dst, args.arch)
    print(f'{args.src} (PyramidTNT {meta["arch"]}) -> {args.dst}; config: configs/ptnt_s_in1k.py '
          f'with model.backbone.arch={meta["arch"]!r}, '
          f'model.head.in_channels={meta["head_in_channels"]}')


if __name__ == '__main__':
    main()
