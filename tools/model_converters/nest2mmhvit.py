"""Convert a timm NesT checkpoint into an MMPretrain classifier checkpoint for mmhvit.

    python tools/model_converters/nest2mmhvit.py SRC DST [--num-heads H1 H2 H3]

SRC: a timm ``nest_{tiny,small,base}_jx`` (official JAX weights) or ``nest_*`` state dict, ``.pth``
or ``.safetensors``. DST loads into ``configs/nest_t_in1k.py`` (other archs: set
``model.backbone.arch`` and ``model.head.in_channels``; timm's non-jx ``nest_*`` also need
``model.backbone.pool_padding='symmetric'``) and reproduces timm's logits.
``--num-heads`` is only needed for custom archs whose heads are not channels / 32.
SRC may be an ``http(s)://`` URL: it is downloaded once into the torch hub cache (a
``-<sha256 prefix>`` in its name is checked) and read weights-only, like a path.
"""
import argparse

from mmhvit.models.backbones.nest import convert_nest_checkpoint, describe_nest_checkpoint
from mmhvit.models.checkpoint import read_state_dict, save_converted_classifier


def convert(src: str, dst: str, num_heads=None) -> dict:
    state_dict = read_state_dict(src)
    converted = convert_nest_checkpoint(state_dict, num_heads=num_heads, with_head=True)
    return save_converted_classifier(converted, src, dst, describe_nest_checkpoint(converted),
                                     'tools/model_converters/nest2mmhvit.py')


def main(argv=None):
    parser = argparse.ArgumentParser(description='timm NesT -> mmhvit/MMPretrain checkpoint')
    parser.add_argument('src', help='timm NesT checkpoint (.pth or .safetensors), '
                        'a path or an http(s) URL')
    parser.add_argument('dst', help='output .pth')
    parser.add_argument('--num-heads', type=int, nargs=3, metavar='H',
                        help='attention heads per level (default: channels / 32, as official)')
    args = parser.parse_args(argv)
    meta = convert(args.src, args.dst, args.num_heads)
    print(f'{args.src} (NesT {meta["arch"]}) -> {args.dst}')


if __name__ == '__main__':
    main()
