"""The ``mmhvit`` command (also ``python -m mmhvit``): the configs, model zoo and checkpoint
converters of an installed mmhvit, without its source tree.

    mmhvit list                    # the configs (paths under configs/)
    mmhvit zoo                     # the model zoo of configs/metafile.yml
    mmhvit path [CONFIG]           # where an installed config is (no CONFIG: configs/ tools/ demo/)
    mmhvit dump CONFIG DIR         # DIR/<config>.py, every base merged in: start from it anywhere
    mmhvit demo IMAGE CONFIG [CHECKPOINT] --out-file out.png   # = demo/image_demo.py
    mmhvit convert FAMILY SRC DST  # official / timm / mmpretrain weights -> an mmhvit classifier

CONFIG is a path under configs/ (``.py`` optional), a model-zoo name or a config's file name. A
user's mistake (a missing config or file, a file of another family) ends with one line
``error: ...`` and exit status 1; ``--debug`` shows its traceback.
"""
import argparse
import functools
import os
import os.path as osp

from mmhvit.mim import find_config, list_configs, mim_root, model_zoo
from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors
from mmhvit.version import __version__


def _list(args):
    for config in list_configs(with_bases=args.all):
        print(config)


def _zoo(args):
    rows = [('name', 'backbone', 'data', 'result', 'config')]
    for model in model_zoo():
        results = model.get('Results') or []
        result = '; '.join(
            f'{r["Dataset"]} ' + ', '.join(f'{k} {v}' for k, v in r['Metrics'].items())
            for r in results) or 'not trained'
        data = (model.get('Metadata') or {}).get('Training Data', '')
        rows.append((model['Name'], model['In Collection'], data, result, model['Config']))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print('  '.join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())


def _path(args):
    print(osp.abspath(find_config(args.config) if args.config else mim_root()))


def dump_config(config: str, out_dir: str, options: dict = None) -> str:
    """Write ``config`` with its bases merged (``mmdet::`` ones from the installed library) and
    ``options`` applied to ``out_dir/<name>.py``; returns that path."""
    from mmengine.config import Config
    path = find_config(config)
    cfg = Config.fromfile(path)
    if options:
        cfg.merge_from_dict(options)
    os.makedirs(out_dir, exist_ok=True)
    out = osp.join(out_dir, osp.basename(path))
    cfg.dump(out)
    return out


def _dump(args):
    print(dump_config(args.config, args.dir, args.cfg_options))


def _demo(args):
    from mmhvit.apis import infer_image
    print(infer_image(args.image, find_config(args.config), args.checkpoint, args.out_file,
                      args.device, args.score_thr))
    print(f'drawing: {args.out_file}')


def _convert(args):
    from mmhvit.models.converters.files import conversion_summary, convert_file
    options = {}
    for option, family in (('num_heads', 'nest'), ('arch', 'ptnt')):
        if getattr(args, option) is not None:
            if args.family != family:
                raise ValueError(f'--{option.replace("_", "-")} is an option of {family}, not of '
                                 f'{args.family}')
            options[option] = getattr(args, option)
    meta = convert_file(args.family, args.src, args.dst, **options)
    print(conversion_summary(args.family, args.src, args.dst, meta))


def build_parser() -> argparse.ArgumentParser:
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(
        prog='mmhvit',
        description='Configs, model zoo and converters of mmhvit (TransCNN, HAT-Net, NesT, TNT, '
        'PyramidTNT).',
        epilog=f'files: {mim_root()}')
    parser.add_argument('--version', action='version', version=f'mmhvit {__version__}')
    commands = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')
    debug = argparse.ArgumentParser(add_help=False)
    add_debug_argument(debug)
    add_command = functools.partial(commands.add_parser, parents=[debug])  # all take --debug

    sub = add_command('list', help='list the configs')
    sub.add_argument('--all', action='store_true', help='also the bases (_name.py)')
    sub.set_defaults(func=_list)

    sub = add_command('zoo', help='list the model zoo (configs/metafile.yml)')
    sub.set_defaults(func=_zoo)

    sub = add_command(
        'path', help="print a config's installed path; without CONFIG the folder that holds "
        'configs/, tools/ (train.py, test.py, ...), demo/ and model-index.yml')
    sub.add_argument('config', nargs='?', help='path under configs/, model-zoo name or file name')
    sub.set_defaults(func=_path)

    sub = add_command('dump', help='write a config with its bases merged into DIR')
    sub.add_argument('config', help='path under configs/, model-zoo name or file name')
    sub.add_argument('dir', help='output directory (created if missing)')
    sub.add_argument('--cfg-options', nargs='+', action=DictAction,
                     help='override settings, key=value as in tools/train.py')
    sub.set_defaults(func=_dump)

    sub = add_command('demo', help='run a config on one image and draw the result')
    sub.add_argument('image', help='input image')
    sub.add_argument('config', help='config path or name')
    sub.add_argument('checkpoint', nargs='?', help='weights (default: none, random init)')
    sub.add_argument('--out-file', default='out.png', help='the drawn result (default out.png)')
    sub.add_argument('--device', help='cpu, cuda, ... (default: a GPU if there is one)')
    sub.add_argument('--score-thr', type=float, default=0.3,
                     help='detection: boxes below this score are not drawn (default 0.3)')
    sub.set_defaults(func=_demo)

    _add_convert_command(add_command)
    return parser


def _add_convert_command(add_command) -> None:
    sub = add_command(
        'convert', help='convert official / timm / mmpretrain weights into an MMPretrain '
        'classifier checkpoint that the family\'s configs/*_in1k.py loads',
        description='transcnn: official TransCNN-*.pth; hatnet: official HAT-Net_*.pth; nest: '
        'timm nest_*_jx (official JAX weights) or nest_* (also set model.backbone.pool_padding='
        '"symmetric"); tnt: official tnt_*.pth.tar, timm or mmpretrain TNT; ptnt: official '
        'PyramidTNT ptnt_*.pth.tar. SRC may be .pth, .pth.tar or .safetensors, a path or an '
        'http(s) URL (downloaded once into the torch hub cache, a -<sha256 prefix> in its name '
        'checked); it is read weights-only.')
    sub.add_argument('family', choices=('transcnn', 'hatnet', 'nest', 'tnt', 'ptnt'))
    sub.add_argument('src', help='the checkpoint to convert: a path or an http(s) URL')
    sub.add_argument('dst', help='the .pth to write')
    sub.add_argument('--num-heads', type=int, nargs=3, metavar='H',
                     help='nest: attention heads per level (default: channels / 32, as official; '
                     'only custom archs need it)')
    sub.add_argument('--arch', help='ptnt: refuse a file of another arch (tiny, small, medium, '
                     'base)')
    sub.set_defaults(func=_convert)


@reports_user_errors
def main(argv=None):
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == '__main__':
    main()
